"""Light build: the CUDA source split into a kernel unit without torch headers (nvcc) and host units (g++) that
share one precompiled torch/extension.h; used only when it builds, else the caller falls back to the plain build.

Kernel launches `k<<<g, b, s, t>>>(args)` in host code become `cudaLaunchKernel` on nvcc's host stub for `k`.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from dice_lsp.anatomy.cuda import read_functions

_TORCH_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"](torch|ATen|c10|pybind11)/[^\n]*$", re.M)
_KERNEL_UNIT_HEADER = "#include <cuda.h>\n#include <cuda_runtime.h>\n"
_HOST_SHIM = """#include <cuda_runtime.h>
#include <cstddef>
#include <tuple>
#include <utility>
#define __global__
#define __device__
#define __host__
#define __constant__
#define __shared__
#define __forceinline__ inline
#define __launch_bounds__(...)
namespace dice_light {
template <typename... P, typename... A, std::size_t... I>
inline void launch_with(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t shared, cudaStream_t stream,
                        std::index_sequence<I...>, A&&... args) {
  std::tuple<P...> values(static_cast<P>(std::forward<A>(args))...);
  void* pointers[] = {static_cast<void*>(&std::get<I>(values))..., nullptr};
  cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, pointers, shared, stream);
}
template <typename... P, typename... A>
inline void launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t shared, cudaStream_t stream,
                   A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
  launch_with(kernel, grid, block, shared, stream, std::index_sequence_for<P...>{}, std::forward<A>(args)...);
}
}  // namespace dice_light
"""


class LightBuildError(Exception):
    """The light build does not apply or failed; the caller falls back to the plain build."""


class _Probe(Exception):
    pass


def layout(cpp: list[str], cuda: list[str]) -> dict:
    return {}  # a light build's output is never shown: it either builds or the plain build reports


def _blank(text: str, start: int, end: int, replacement: str = "") -> str:
    """Replace text[start:end] keeping its newlines, so line numbers stay put."""
    kept = "\n" * text.count("\n", start, end)
    return text[:start] + replacement + kept + text[end:]


def split(value: str) -> tuple[str, str]:
    """(kernel unit text, host unit text) for one CUDA source string."""
    functions, errors = read_functions(value)
    if errors:
        raise LightBuildError("the CUDA source does not parse")
    kernels = [f for f in functions if f.kind == "global"]
    for kernel in kernels:
        head = value[max(0, kernel.start - 200):value.index("{", kernel.start)]
        if "template" in head.rsplit(";", 1)[-1].rsplit("}", 1)[-1] or "static" in value[kernel.start:kernel.name_start]:
            raise LightBuildError(f"kernel {kernel.name} is a template or static")
    device_text, host_text = value, value
    for function in sorted(functions, key=lambda f: -f.start):
        if function.kind == "host":
            device_text = _blank(device_text, function.start, function.end)
        elif function.kind == "global":
            declaration = value[function.start:value.index("{", function.start)].rstrip() + ";"
            host_text = _blank(host_text, function.start, function.end, declaration)
        else:
            host_text = _blank(host_text, function.start, function.end)
    device_text = _TORCH_INCLUDE.sub(lambda m: "// " + m.group(0).strip(), device_text)
    names = {k.name for k in kernels}
    return device_text, rewrite_launches(host_text, names)


def rewrite_launches(text: str, kernels: set[str]) -> str:
    """`k<<<grid, block[, shared[, stream]]>>>(args)` -> `dice_light::launch(k, grid, block, shared, stream, args)`."""
    out, position = [], 0
    for match in re.finditer(r"([A-Za-z_]\w*)\s*<<<", text):
        if match.start() < position:
            continue
        name = match.group(1)
        if name not in kernels:
            raise LightBuildError(f"launch of {name}, which is not a plain kernel of this source")
        close = text.find(">>>", match.end())
        if close < 0:
            raise LightBuildError("unbalanced <<< >>>")
        config = _top_level_split(text[match.end():close])
        if not 2 <= len(config) <= 4:
            raise LightBuildError("unexpected launch configuration")
        config += ["0", "0"][: 4 - len(config)]
        paren = text.find("(", close + 3)
        if paren < 0 or text[close + 3:paren].strip():
            raise LightBuildError("launch without arguments")
        end = _matching(text, paren)
        args = text[paren + 1:end].strip()
        call = f"dice_light::launch({name}, {', '.join(config)}{', ' + args if args else ''})"
        out.append(text[position:match.start()] + call + "\n" * text.count("\n", match.start(), end + 1))
        position = end + 1
    return "".join(out) + text[position:]


def _matching(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise LightBuildError("unbalanced parentheses in a launch")


def _top_level_split(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += char
    parts.append(current.strip())
    return parts


def probe(arguments: dict[str, Any], directory: Path, original: Callable[..., Any]) -> dict[str, str]:
    """Let load_inline write main.cpp and build.ninja as it would, stop it before ninja runs, read its flags."""
    # torch only here: the caller's process imports this module (through build's types) and must not load torch
    import torch.utils.cpp_extension as cpp_extension

    saved = cpp_extension._run_ninja_build

    def stop(*args: Any, **kwargs: Any) -> None:
        raise _Probe()

    cpp_extension._run_ninja_build = stop
    directory.mkdir(parents=True, exist_ok=True)
    sources = {"cpp_sources": list(_strings(arguments.get("cpp_sources"))),
               "cuda_sources": list(_strings(arguments.get("cuda_sources")))}
    try:
        original(**{**arguments, **sources, "build_directory": str(directory), "verbose": False})
    except _Probe:
        pass
    finally:
        cpp_extension._run_ninja_build = saved
    ninja = (directory / "build.ninja").read_text()
    flags = {}
    for key in ("cxx", "nvcc", "cflags", "post_cflags", "cuda_cflags", "cuda_post_cflags", "ldflags"):
        match = re.search(rf"^{key} = (.*)$", ninja, re.M)
        flags[key] = match.group(1) if match else ""
    if not flags["nvcc"]:
        raise LightBuildError("load_inline planned no CUDA compile")
    return flags


def _strings(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _run(command: str, cwd: Path) -> str:
    done = subprocess.run(command, shell=True, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise LightBuildError(f"{command}\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


HEADER = "dice_torch.h"


def header_key(flags: dict[str, str]) -> str:
    """What the precompiled header depends on: the compiler and its flags, without the extension's name."""
    cflags = re.sub(r"-DTORCH_EXTENSION_NAME=\S+", "", flags["cflags"])
    post = re.sub(r"-DTORCH_EXTENSION_NAME=\S+", "", flags["post_cflags"])
    return hashlib.sha256(f"{flags['cxx']}|{cflags}|{post}".encode()).hexdigest()[:16]


def precompiled_header(flags: dict[str, str], shared: Path | None, private: Path) -> Path:
    """torch/extension.h compiled once per compiler and flags: the cache's shared one (`shared`, read-only here,
    made by `prepare` in a builder that compiles nothing of a candidate's) where it holds this key, else one made
    now under `private` (this build's own scratch)."""
    key = header_key(flags)
    if shared is not None and (shared / key / f"{HEADER}.gch").is_file():
        return shared / key / HEADER
    directory = private / "pch" / key
    header = directory / HEADER
    if not (directory / f"{HEADER}.gch").exists():
        directory.mkdir(parents=True, exist_ok=True)
        header.write_text("#include <torch/extension.h>\n")
        cflags = re.sub(r"-DTORCH_EXTENSION_NAME=\S+", "", flags["cflags"])
        post = re.sub(r"-DTORCH_EXTENSION_NAME=\S+", "", flags["post_cflags"])
        _run(f"{flags['cxx']} {cflags} -x c++-header {header} -o {directory / (HEADER + '.gch.tmp')} {post}",
             directory)
        (directory / f"{HEADER}.gch.tmp").rename(directory / f"{HEADER}.gch")
    return header


def prepare(root: Path, original: Callable[..., Any], shared: Path | None = None) -> Path:
    """The precompiled header that light builds of plain load_inline calls (no extra flags) use: the one `shared`
    (the cache's folder, read-only) holds for these flags, else one built now under `root/pch/<key>/` (a builder's
    scratch; the caller copies it into the cache), before the first check needs it: on a machine's first check it
    was ~24 s of a 40-59 s build on the H200 machine."""
    arguments = {"name": "dice_prepare", "cpp_sources": ["torch::Tensor dice_prepare(torch::Tensor x);"],
                 "cuda_sources": ["torch::Tensor dice_prepare(torch::Tensor x) { return x; }"],
                 "functions": ["dice_prepare"]}
    return precompiled_header(probe(arguments, root / "prepare" / "probe", original), shared, root)


def build(name: str, cpp: list[str], cuda: list[str], arguments: dict[str, Any], directory: Path,
          original: Callable[..., Any], shared: Path | None, private: Path) -> str:
    """Build `name`.so from split units; returns its path or raises LightBuildError. The precompiled header is the
    cache's shared one (`shared`, read-only) where it holds one for these flags, else one made under `private`."""
    directory.mkdir(parents=True, exist_ok=True)
    parts = [split(value) for value in cuda]
    flags = probe(arguments, directory / "probe", original)
    (directory / "kernels.cu").write_text(_KERNEL_UNIT_HEADER + "\n".join(device for device, _ in parts))
    (directory / "host.cpp").write_text("#include <torch/extension.h>\n" + _HOST_SHIM
                                        + "\n".join(host for _, host in parts))
    (directory / "main.cpp").write_text((directory / "probe" / "main.cpp").read_text())
    with ThreadPoolExecutor(3) as pool:
        # The CUDA unit needs no torch header, so nvcc runs while the precompiled header is built (a machine's first
        # light build: ~24 s of g++ on the H200 machine, which the kernel's compile used to wait for).
        kernels = pool.submit(_run, f"{flags['nvcc']} {flags['cuda_cflags']} -c kernels.cu -o kernels.o "
                                    f"{flags['cuda_post_cflags']}", directory)
        header = precompiled_header(flags, shared, private)
        include = f"-include {shlex.quote(str(header))} -Winvalid-pch"
        hosts = [pool.submit(_run, f"{flags['cxx']} {include} {flags['cflags']} -c {unit}.cpp -o {unit}.o "
                                   f"{flags['post_cflags']}", directory) for unit in ("host", "main")]
        for job in (kernels, *hosts):
            job.result()
    library = directory / f"{name}.so"
    _run(f"{flags['cxx']} main.o host.o kernels.o {flags['ldflags']} -o {library}", directory)
    return str(library)
