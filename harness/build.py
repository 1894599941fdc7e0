"""Build stage: the candidate's own `load_inline` calls, routed through the persistent build cache.

Each call is keyed by its content. In the candidate's worker (`Builder`) a cached build is loaded after its hash is
checked; a new one is asked of the caller, which has a builder worker compile it (`compile_entry`) in the builder's
own scratch space and copies the library into the cache once the builder has ended (`builder.build_entry`). A builder
never loads what it builds: a light build first (`harness.light`), else load_inline as the candidate wrote it, whose
compiler output becomes diagnostics. A call `harness.admission` refuses is never built: its name, flags and sizes are
checked in the candidate's worker (torch's usual RuntimeError, with the reason), by the caller and by the builder.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from dice_lsp.harness import admission, light
from dice_lsp.harness.cache import content_key, read_done

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
    refused: str = ""  # why the harness would not build it at all (`harness.admission`); "" when it was tried
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


@dataclass(frozen=True)
class Call:
    """One load_inline call as data: what decides its build, and all a builder needs to make it."""

    name: str
    cpp: tuple[str, ...]
    cuda: tuple[str, ...]
    flags: dict[str, Any]  # load_inline's other arguments that change the build (extra_cflags, functions, ...)
    arch: str  # TORCH_CUDA_ARCH_LIST
    torch: str
    python: str

    @property
    def key(self) -> str:
        return content_key({"name": self.name, "cpp": list(self.cpp), "cuda": list(self.cuda), "flags": self.flags,
                            "torch": self.torch, "arch": self.arch, "python": self.python})

    @property
    def entry(self) -> str:
        """The name of its cache entry, a folder directly in the cache's root."""
        if not admission.safe_name(self.name):  # refused long before; never a path that leaves the root
            raise ValueError(f"extension name {self.name!r} is not an identifier")
        return f"{self.name}-{self.key}"

    def directory(self, root: str | os.PathLike[str]) -> Path:
        return Path(root) / self.entry

    @property
    def python_module(self) -> bool:
        return bool(self.flags.get("is_python_module", True))

    @property
    def plain_flags(self) -> bool:
        """No compiler or linker flags of the candidate's: such builds may share the precompiled header (flags could
        make a compiler load code, so a build with them never writes what other builds use)."""
        return not any(self.flags.get(k) for k in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags",
                                                   "extra_include_paths"))


FLAGS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths", "functions", "with_cuda",
         "is_python_module", "with_pytorch_error_handling", "no_implicit_headers")


def _torch_version() -> str:
    import torch  # only in a worker: the caller's process reads Extension and Segment without torch

    return torch.__version__


class Builder:
    """Replaces torch's load_inline in a worker that runs a candidate; records every call in `extensions`.

    A call whose entry the cache holds (its library's hash checked) is loaded from there. Any other is asked of
    the caller through `ask(call, mode) -> Extension`: the caller has a builder worker make the entry (this process
    cannot write the cache), then this one loads what it made. `mode` "plain" asks for the plain build after a
    light one did not load."""

    def __init__(self, root: str, arch: str, ask: Callable[[Call, str], Extension]) -> None:
        import torch.utils.cpp_extension as cpp_extension

        self.root = Path(root)
        self.arch = arch
        self.ask = ask
        self.extensions: list[Extension] = []
        self.cpp_extension = cpp_extension
        self.signature = inspect.signature(cpp_extension.load_inline)
        self.torch_version = _torch_version()

    def install(self) -> None:
        self.cpp_extension.load_inline = self.load_inline

    def call_of(self, *args: Any, **kwargs: Any) -> Call:
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        p = dict(bound.arguments)
        flags = {k: p.get(k) for k in FLAGS if k in p}
        return Call(str(p["name"]), tuple(_strings(p.get("cpp_sources"))), tuple(_strings(p.get("cuda_sources"))),
                    json.loads(json.dumps(flags, default=str)), self.arch, self.torch_version,
                    "%d.%d" % sys.version_info[:2])

    def load_inline(self, *args: Any, **kwargs: Any) -> Any:
        call = self.call_of(*args, **kwargs)
        why = admission.refusal(call)
        if why:  # never asked of the caller, which would refuse it too (and end the check)
            self.extensions.append(Extension(str(call.name)[:admission.MAX_NAME], "", "", with_cuda=bool(call.cuda),
                                             refused=why, output=why))
            raise RuntimeError(f"Error building extension {str(call.name)[:admission.MAX_NAME]!r}: {why}")
        directory = call.directory(self.root)
        record = Extension(call.name, call.key, str(directory), with_cuda=bool(call.cuda))
        self.extensions.append(record)
        start = time.perf_counter()
        try:
            done = read_done(directory)
            if done is not None:
                record.mode, record.cached, record.ok = done.mode, True, True
            else:
                self._ask(call, record, "")
                done = read_done(directory)
                if done is None:
                    raise RuntimeError(f"the build of extension {call.name!r} left no library with its recorded hash")
            record.layout = _layout(done.mode, list(call.cpp), list(call.cuda))
            try:
                return self._load(call, done.library)
            except ImportError as error:
                if done.mode != "light":
                    raise
                record.light_error = f"the light build did not load: {error}"[-4000:]
            self._ask(call, record, "plain")  # the light build did not load: build it as written
            done = read_done(directory)
            if done is None or done.mode != "plain":
                raise RuntimeError(f"the plain build of extension {call.name!r} left no library")
            record.layout = _layout("plain", list(call.cpp), list(call.cuda))
            return self._load(call, done.library)
        finally:
            record.seconds = time.perf_counter() - start

    def _ask(self, call: Call, record: Extension, mode: str) -> None:
        made = self.ask(call, mode)
        light_error = record.light_error
        for name in ("mode", "ok", "output", "light_error"):
            setattr(record, name, getattr(made, name))
        record.light_error = record.light_error or light_error
        record.cached = False
        record.layout = _layout(made.mode or "plain", list(call.cpp), list(call.cuda))  # where its errors point
        if not made.ok:  # what torch raises, so the candidate's own error handling sees the usual exception
            raise RuntimeError(f"Error building extension '{call.name}'")

    def _load(self, call: Call, library: str) -> Any:
        if call.python_module:
            return import_library(call.name, library)
        import torch

        torch.ops.load_library(library)
        return library


def compile_entry(call: Call, directory: str, try_light: bool, mode: str = "", header: str = "") -> Extension:
    """In a builder worker: build `call` in `directory` (the builder's own scratch space), light first unless `mode`
    is "plain", never loading it; the library lies at `<directory>/<mode>/<name>.so` when `ok`. `header`: the cache's
    shared precompiled-header folder, read-only here ("": none; the light build makes its own). Runs no code of the
    candidate's: its sources and flags, checked again here, go to the compilers only."""
    import torch.utils.cpp_extension as cpp_extension

    folder = Path(directory)
    record = Extension(str(call.name)[:admission.MAX_NAME], "", directory, with_cuda=bool(call.cuda))
    why = admission.refusal(call, mode)
    if why:
        record.refused = record.output = why
        return record
    record.key = call.key
    start = time.perf_counter()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        arguments = {**call.flags, "name": call.name, "cpp_sources": list(call.cpp),
                     "cuda_sources": list(call.cuda) or None}
        original = _unloaded(cpp_extension)
        if (try_light and mode != "plain" and call.cuda and call.python_module
                and not call.flags.get("no_implicit_headers")):
            # Flags of the candidate's never use the shared header: a header built with them is this build's own
            shared = Path(header) if header and call.plain_flags else None
            try:
                light.build(call.name, list(call.cpp), list(call.cuda), arguments, folder / "light", original,
                            shared, folder)
            except Exception as error:  # any failure of the light path only means: build it as written
                record.light_error = f"{type(error).__name__}: {error}"[-4000:]
            else:
                record.mode, record.ok = "light", True
                return record
        _plain(arguments, call.name, folder, record, original)
        return record
    finally:
        record.seconds = time.perf_counter() - start


def _unloaded(cpp_extension: Any) -> Callable[..., Any]:
    """torch's load_inline, made to build without loading (a builder never runs the library's initialisers) and
    without torch's versioning: a second load_inline of one name in a process (the light build's probe, then the
    plain build in another folder) would otherwise build `<name>_v1.so`, whose module is `<name>_v1`."""
    cpp_extension._import_module_from_library = lambda name, path, is_python_module: None
    load_inline = cpp_extension.load_inline

    def first_version(*args: Any, **kwargs: Any) -> Any:
        name = kwargs["name"] if "name" in kwargs else args[0]
        cpp_extension.JIT_EXTENSION_VERSIONER.entries.pop(name, None)
        return load_inline(*args, **kwargs)

    return first_version


def _plain(arguments: dict[str, Any], name: str, directory: Path, record: Extension,
           original: Callable[..., Any]) -> None:
    plain = directory / "plain"
    plain.mkdir(parents=True, exist_ok=True)
    log = directory / "plain.log"
    record.mode = "plain"
    try:
        with captured_stdout(log):
            original(**{**arguments, "build_directory": str(plain), "verbose": True})
    except Exception as error:
        record.output = _read(log) + "\n" + str(error)
        return
    record.output = _read(log)
    library = plain / f"{name}.so"
    if library.is_file():
        record.ok = True
    else:
        record.output += f"\nthe build left no {library.name}"


def _layout(mode: str, cpp: list[str], cuda: list[str]) -> dict[str, list[Segment]]:
    if mode == "light":
        return light.layout(cpp, cuda)
    return layout(cpp, cuda, MAIN_CPP_HEADER, CUDA_CU_HEADER)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
