"""Build stage, inside a worker: the candidate's own `load_inline` calls, routed through the persistent build cache.

Each call is keyed by its content; a cached build is imported directly, a new one is tried as a light build first
(`harness.light`) and falls back to load_inline as the candidate wrote it, whose compiler output becomes diagnostics.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

from dice_lsp.harness import light
from dice_lsp.harness.cache import BuildLock, content_key

# load_inline's implicit includes, checked against torch/utils/cpp_extension.py: main.cpp gets one line before the
# cpp sources, cuda.cu three lines before the cuda sources; sources are joined with "\n".
MAIN_CPP_HEADER = ("#include <torch/extension.h>",)
CUDA_CU_HEADER = ("#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>")


@dataclass
class Segment:
    """Lines [first, first + count) of a generated file hold one source string (1-based lines)."""

    first: int
    count: int
    role: str
    value: str


@dataclass
class Extension:
    """What happened to one load_inline call."""

    name: str
    key: str
    directory: str
    with_cuda: bool
    mode: str = ""  # "light" | "plain" | "" (not built)
    cached: bool = False
    ok: bool = False
    seconds: float = 0.0
    output: str = ""  # compiler output of the build that decided the result
    light_error: str = ""  # why the light build was not used (for the benchmark and debugging)
    layout: dict[str, list[Segment]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def layout(cpp: list[str], cuda: list[str], header_cpp: tuple[str, ...], header_cu: tuple[str, ...],
           cpp_name: str = "main.cpp", cu_name: str = "cuda.cu") -> dict[str, list[Segment]]:
    def place(header: tuple[str, ...], values: list[str], role: str) -> list[Segment]:
        line, segments = len(header) + 1, []
        for value in values:
            count = value.count("\n") + 1
            segments.append(Segment(line, count, role, value))
            line += count
        return segments

    result = {cpp_name: place(header_cpp, cpp, "cpp")}
    if cuda:
        result[cu_name] = place(header_cu, cuda, "cuda")
    return result


def _strings(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


@contextlib.contextmanager
def captured_stdout(path: Path) -> Iterator[None]:
    """Send fd 1 and 2 (where ninja and the compilers write) to `path` while the block runs."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "wb") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def import_library(name: str, path: str) -> Any:
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class Builder:
    """Replaces torch's load_inline in this process; records every call in `extensions`."""

    def __init__(self, root: str, try_light: bool, arch: str) -> None:
        # torch only here: the caller's process reads this module's Extension and Segment (messages) without it
        import torch
        import torch.utils.cpp_extension as cpp_extension

        self.root = Path(root)
        self.light = try_light
        self.arch = arch
        self.extensions: list[Extension] = []
        self.cpp_extension = cpp_extension
        self.original = cpp_extension.load_inline
        self.signature = inspect.signature(self.original)
        self.torch_version = torch.__version__

    def install(self) -> None:
        self.cpp_extension.load_inline = self.load_inline

    def load_inline(self, *args: Any, **kwargs: Any) -> Any:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        p = dict(bound.arguments)
        name = str(p["name"])
        cpp, cuda = _strings(p.get("cpp_sources")), _strings(p.get("cuda_sources"))
        flags = {k: p.get(k) for k in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths",
                                       "functions", "with_cuda", "is_python_module", "with_pytorch_error_handling",
                                       "no_implicit_headers") if k in p}
        key = content_key({"name": name, "cpp": cpp, "cuda": cuda, "flags": flags, "torch": self.torch_version,
                           "arch": self.arch, "python": sys.version_info[:2]})
        directory = self.root / f"{name}-{key}"
        record = Extension(name, key, str(directory), with_cuda=bool(cuda))
        self.extensions.append(record)
        start = time.perf_counter()
        try:
            with BuildLock(directory):
                return self._load(p, name, cpp, cuda, directory, record)
        finally:
            record.seconds = time.perf_counter() - start

    def _load(self, p: dict[str, Any], name: str, cpp: list[str], cuda: list[str], directory: Path,
              record: Extension) -> Any:
        done = directory / "dice.done"
        if done.exists() and p.get("is_python_module", True):
            mode, library = done.read_text().split("\n", 1)
            if Path(library.strip()).exists():
                record.mode, record.cached, record.ok = mode, True, True
                record.layout = self._layout(mode, cpp, cuda)
                return import_library(name, library.strip())
        if self.light and cuda and p.get("is_python_module", True) and not p.get("no_implicit_headers"):
            try:
                library = light.build(name, cpp, cuda, p, directory / "light", self.original)
                module = import_library(name, library)
            except Exception as error:  # any failure of the light path only means: build it as written
                record.light_error = f"{type(error).__name__}: {error}"[-4000:]
            else:
                done.write_text(f"light\n{library}")
                record.mode, record.ok = "light", True
                record.layout = self._layout("light", cpp, cuda)
                return module
        return self._plain(p, name, cpp, cuda, directory, record)

    def _plain(self, p: dict[str, Any], name: str, cpp: list[str], cuda: list[str], directory: Path,
               record: Extension) -> Any:
        plain = directory / "plain"
        plain.mkdir(parents=True, exist_ok=True)
        log = directory / "plain.log"
        record.mode = "plain"
        record.layout = self._layout("plain", cpp, cuda)
        p = {**p, "build_directory": str(plain), "verbose": True, "cpp_sources": list(cpp),
             "cuda_sources": list(cuda) or None}
        try:
            with captured_stdout(log):
                module = self.original(**p)
        except Exception as error:
            record.output = _read(log) + "\n" + str(error)
            raise
        record.output = _read(log)
        record.ok = True
        library = plain / f"{name}.so"
        if library.exists():
            (directory / "dice.done").write_text(f"plain\n{library}")
        return module

    def _layout(self, mode: str, cpp: list[str], cuda: list[str]) -> dict[str, list[Segment]]:
        if mode == "light":
            return light.layout(cpp, cuda)
        return layout(cpp, cuda, MAIN_CPP_HEADER, CUDA_CU_HEADER)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
