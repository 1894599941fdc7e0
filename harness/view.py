"""What a worker's sandbox shows of the disk: host paths at their own paths in a root that starts empty.

The system's programs, libraries and headers (`SYSTEM`), a few files of /etc (`ETC`), the runtime a worker needs
wherever it is installed (`runtime_paths`: the interpreter and its packages, this package's folders, torch, the CUDA
toolkit, the linker's folders) and the GPU's compute device nodes. `harness.sandbox` binds them with `View`.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import shutil
import site
import stat
import sys
import sysconfig
from pathlib import Path


class View:
    """bwrap arguments that show host paths at their own paths in a root that starts empty: each bound path's
    folders on the way are made (0755: any user may pass), and links on the way (/lib -> usr/lib, /usr/local/cuda
    -> cuda-13.0) are made as the same links, so a path works inside as it does outside. A path inside one already
    bound comes with it. The paths are the caller's own (the system's, its runtime's, the folders it made), never
    one a worker shaped."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self.made: set[str] = set()  # folders and links made, and paths bound, inside
        self.bound: list[str] = []

    def bind(self, kind: str, path: str) -> None:
        real = self._reach(os.path.abspath(path), 0)
        if real is None or not os.path.exists(real) or any(inside(real, [b]) for b in self.bound if
                                                           kind == "--ro-bind" or b == real):
            return
        self._folders_above(real)
        self.args += [kind, real, real]
        self.made.add(real)
        self.bound.append(real)

    def _reach(self, path: str, depth: int) -> str | None:
        """`path` with every link on the way made inside as it is outside; returns the real path it ends at."""
        if depth > 40:
            return None
        current = "/"
        for part in Path(path).parts[1:]:
            step = os.path.join(current, part)
            if os.path.islink(step):
                target = os.readlink(step)
                if step not in self.made and not any(inside(step, [b]) for b in self.bound):
                    self._folders_above(step)
                    self.args += ["--symlink", target, step]
                    self.made.add(step)
                resolved = self._reach(os.path.normpath(os.path.join(current, target)), depth + 1)
                if resolved is None:
                    return None
                current = resolved
            else:
                current = step
        return current

    def _folders_above(self, path: str) -> None:
        for folder in reversed(Path(path).parents):
            name = str(folder)
            if name != "/" and name not in self.made and not any(inside(name, [b]) for b in self.bound):
                self.made.add(name)
                self.args += ["--perms", "0755", "--dir", name]


# The system folders every worker sees: programs and libraries, their headers (builders compile). Not /usr/local,
# /usr/share or /usr/src, where a machine keeps its own programs, data and sources (the runtime's paths there are
# bound on their own)
SYSTEM = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr/bin", "/usr/sbin", "/usr/lib",
           "/usr/lib32", "/usr/lib64", "/usr/libx32", "/usr/libexec", "/usr/include")
# The /etc files the runtime reads: the dynamic linker's cache, users' and groups' names, name lookup's settings,
# the time zone, and the alternatives (c++ -> g++)
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf", "hosts", "host.conf",
        "gai.conf", "localtime", "alternatives")


def system_paths() -> list[str]:
    return [p for p in (*SYSTEM, *(f"/etc/{name}" for name in ETC)) if os.path.lexists(p)]


# A GPU's own device node (/dev/nvidia0, ...): where one exists, this machine has an NVIDIA GPU for CUDA to start on
GPU_NODE = "/dev/nvidia[0-9]*"


def gpu_nodes() -> list[str]:
    """The device nodes CUDA opens: the GPUs, the control and unified-memory nodes, MIG's capabilities. Not the
    display's (nvidia-modeset, /dev/dri), which compute never needs."""
    return sorted(n for n in glob.glob("/dev/nvidia*") if os.path.basename(n) != "nvidia-modeset")


def gpu_nodes_open_to_all(nodes: list[str] | None = None) -> bool:
    """Whether any user may read and write every GPU device node (the drivers' usual mode): else an unprivileged
    worker could not use the GPU. Only the character devices count: /dev/nvidia-caps is a folder (0755 on the H100
    of 2026-12-07, which this test failed) whose files are MIG's capabilities, root's alone, and used only by MIG."""
    try:
        modes = [os.stat(node).st_mode for node in (gpu_nodes() if nodes is None else nodes)]
    except OSError:
        return False
    devices = [mode for mode in modes if stat.S_ISCHR(mode)]
    return bool(devices) and all(mode & 0o006 == 0o006 for mode in devices)


def readable_runtime() -> list[str]:
    """The runtime paths an unprivileged user can use. One only its owner may read (a `mktemp -d` checkout, the
    caller's own script folder) is made afresh in the sandbox and its entries anyone may read are bound one by one."""
    found = []
    for path in runtime_paths():
        if _readable_by_all(path):
            found.append(path)
        elif os.path.isdir(path):
            with os.scandir(path) as entries:
                found += sorted(e.path for e in entries if _readable_by_all(e.path))
    return found


def _readable_by_all(path: str) -> bool:
    """A folder anyone may list and enter, or a file anyone may read."""
    mode = _mode(path)
    need = 0o005 if stat.S_ISDIR(mode) else 0o004
    return mode != 0 and mode & need == need


def _mode(path: str) -> int:
    try:
        return os.stat(path).st_mode
    except OSError:
        return 0


def inside(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + os.sep) for f in folders)


# Prefixes that are the system's own: an interpreter installed there is bound by its own folders, not the prefix's
SHARED_PREFIXES = ("/", "/usr", "/usr/local", "/opt")


@functools.lru_cache(maxsize=1)
def runtime_paths() -> tuple[str, ...]:
    """Host paths a worker needs besides the system's: the interpreter (its executable, standard library, headers
    and packages, the folders its .pth files add, PYTHONPATH's folders), this package's folders (not the checkout
    that holds them), torch and the other packages a worker imports wherever they are installed, and the CUDA
    toolkit, the compilers' toolchains. Not the caller's working folder or its script's, which sys.path also holds."""
    import dice_lsp

    wanted = {sys.executable, os.path.realpath(sys.executable)}
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        if os.path.realpath(prefix) not in SHARED_PREFIXES:
            wanted.add(prefix)  # a venv, a conda environment, a pyenv version: all of it is the interpreter's
    wanted.update(p for key, p in sysconfig.get_paths().items() if key != "data")
    library = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if all(library):
        wanted.add(os.path.join(*library))
    for folder in site.getsitepackages():
        wanted.add(folder)
        wanted.update(_pth_folders(folder))
    wanted.update(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    wanted.discard(str(Path(dice_lsp.__file__).resolve().parent.parent))  # the checkout: only its packages below
    for name in ("dice_lsp", "dice_lsp.harness", "torch", "numpy", "triton"):
        wanted.update(_package_folders(name))
    cuda = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda:
        wanted.add(cuda)
    # Shared libraries where the dynamic linker looks beyond /usr: the GPU driver's (/usr/local/nvidia/lib64 on the
    # GPU machine), the toolkit's, a machine's own
    wanted.update(p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p)
    wanted.update(_linker_folders())
    wanted.update(compiler_folders())
    found = {os.path.abspath(p) for p in wanted if p and os.path.exists(p)}
    return tuple(sorted(p for p in found if os.path.realpath(p) not in SHARED_PREFIXES))


# What PyTorch's extension builder runs: the C++ compiler CXX names (else c++), and the host compiler nvcc gets from
# CC; the plain names too, for a build that reads neither
COMPILERS = ("CXX", "CC")
COMPILER_NAMES = ("c++", "g++", "gcc", "cc")
# The folders of a toolchain's prefix that a compiler reads besides its own: its drivers (cc1plus under libexec), its
# runtime and headers
TOOLCHAIN_FOLDERS = ("bin", "lib", "lib64", "libexec", "include")


def compiler_folders() -> list[str]:
    """The folders of the compilers a build runs that lie outside the system's folders, e.g. /opt/gcc/bin/g++ as CXX
    on the GPU machine (its builder saw no /opt and every build failed with "g++: not found"). A compiler found in
    PREFIX/bin brings PREFIX's toolchain folders, not PREFIX itself, which may be a home folder."""
    names = [os.environ.get(variable, "").split(maxsplit=1)[:1] for variable in COMPILERS]
    found: list[str] = []
    for name in [*(n[0] for n in names if n), *COMPILER_NAMES]:
        path = shutil.which(name)
        if not path:
            continue
        for program in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
            folder = os.path.dirname(program)
            if inside(folder, list(SYSTEM)):
                continue
            if os.path.basename(folder) == "bin":
                prefix = os.path.dirname(folder)
                found += [os.path.join(prefix, sub) for sub in TOOLCHAIN_FOLDERS]
            else:
                found.append(folder)
    return [f for f in dict.fromkeys(found) if os.path.isdir(f)]


def _linker_folders(config: str = "/etc/ld.so.conf", depth: int = 0) -> list[str]:
    """The folders the dynamic linker's configuration names (its cache, bound in /etc, points into them)."""
    folders: list[str] = []
    try:
        lines = Path(config).read_text(errors="replace").splitlines()
    except OSError:
        return folders
    for line in (line.split("#", 1)[0].strip() for line in lines):
        if line.startswith("include") and depth < 4:
            for included in sorted(glob.glob(line.split(None, 1)[1] if " " in line else "")):
                folders += _linker_folders(included, depth + 1)
        elif line.startswith("/"):
            folders.append(line)
    return folders


def _pth_folders(site_folder: str) -> list[str]:
    """The folders the .pth files of a site-packages folder add to sys.path (their lines that are not imports)."""
    folders = []
    try:
        names = sorted(n for n in os.listdir(site_folder) if n.endswith(".pth"))
    except OSError:
        return folders
    for name in names:
        try:
            lines = Path(site_folder, name).read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.strip()
            if line and not line.startswith(("#", "import ", "import\t")):
                folders.append(os.path.join(site_folder, line))
    return folders


def _package_folders(name: str) -> list[str]:
    """Where the package `name` lies, found without importing it (an editable install may map it anywhere)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    return list(spec.submodule_search_locations or ([os.path.dirname(spec.origin)] if spec.origin else []))

