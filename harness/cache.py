"""The persistent build cache: one folder per extension content, made and written by the caller alone.

Each entry `<cache>/<name>-<key>` holds the library (`light/<name>.so` or `plain/<name>.so`) and `dice.done`: the
build's mode, the library's path and its SHA-256, written last (by a rename, so a reader sees all of it or nothing)
and checked before the library is loaded. A builder never writes here: it builds in its own scratch space, and once it
has ended the caller copies the library in (`install`). Every file operation of the caller's goes through folder
descriptors, one component at a time, never through a link (`O_NOFOLLOW`), regular files only, of a bounded size:
nothing a worker wrote can point the caller at a file of the user's. Builds of one entry are serialised by
`BuildLock`, an flock on `<entry>/dice.lock` that the kernel releases when its holder dies.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dice_lsp.harness.errors import HarnessError

OWN_LOCK = "dice.lock"
DONE = "dice.done"
MODES = ("light", "plain")
# In every entry's key: an entry of an earlier layout (written by its builder, which could plant links in it) is never
# read again, only left where it lies
LAYOUT = 2
_DONE_BYTES = 4096
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_REGULAR = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO planted as a file must not block


def content_key(parts: dict[str, Any]) -> str:
    """A short, stable hash of everything that decides what a build produces."""
    blob = json.dumps({**parts, "layout": LAYOUT}, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def digest(path: str | os.PathLike[str]) -> str:
    with open(path, "rb") as handle:
        return _hash(handle.fileno())


def _hash(descriptor: int) -> str:
    hashed = hashlib.sha256()
    while block := os.read(descriptor, 1 << 20):
        hashed.update(block)
    return hashed.hexdigest()


@dataclass(frozen=True)
class Done:
    """A finished entry: how it was built, its library and the library's SHA-256."""

    mode: str
    library: str
    sha256: str


def library_path(entry: str | os.PathLike[str], mode: str, name: str) -> str:
    return str(Path(entry) / mode / f"{name}.so")


def read_done(directory: str | os.PathLike[str]) -> Done | None:
    """In a worker (whose view of the cache is read-only): the entry's record when its library exists and still has
    the recorded hash; None otherwise (not built, or changed since: never loaded then)."""
    try:
        mode, library, sha = (Path(directory) / DONE).read_text().split("\n")[:3]
        return Done(mode, library, sha) if digest(library) == sha else None
    except (OSError, ValueError):
        return None


# -- the caller's side ---------------------------------------------------------------------------------------------
def open_root(path: str | os.PathLike[str]) -> int:
    """The cache's root folder (the caller's own setting, so its path may hold links), made if missing."""
    os.makedirs(path, exist_ok=True)
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_folder(parent: int, name: str, shown: str | os.PathLike[str], make: bool = True) -> int:
    """The folder `name` directly in `parent` (a descriptor), made there if `make` and missing: only a real folder
    of the caller's own, never a link, a file or another user's (HarnessError naming `shown`, its path)."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"{name!r} is not a name in a folder")
    if make:
        try:
            os.mkdir(name, 0o755, dir_fd=parent)
        except FileExistsError:
            pass
    try:
        found = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
            raise _not_ours(shown)
        descriptor = os.open(name, _DIRECTORY, dir_fd=parent)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _not_ours(shown) from None
        raise
    opened = os.fstat(descriptor)
    if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):  # replaced between the two looks
        os.close(descriptor)
        raise _not_ours(shown)
    return descriptor


def _not_ours(path: str | os.PathLike[str]) -> HarnessError:
    return HarnessError(f"{path} is not a folder the harness made (a link, a file or another user's folder); the "
                        "harness neither follows nor changes it: remove it", "setup")


def open_beneath(folder: int, relative: str, limit: int) -> int:
    """A regular file of at most `limit` bytes at `relative` below the folder descriptor `folder`, opened one
    component at a time without following a link; OSError otherwise (a link, a FIFO, a device, too large)."""
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise OSError(errno.EINVAL, f"{relative!r} is not a plain relative path")
    opened = [folder]
    try:
        for part in parts[:-1]:
            opened.append(os.open(part, _DIRECTORY, dir_fd=opened[-1]))
        descriptor = os.open(parts[-1], _REGULAR, dir_fd=opened[-1])
    finally:
        for descriptor_above in opened[1:]:
            os.close(descriptor_above)
    found = os.fstat(descriptor)
    if not stat.S_ISREG(found.st_mode) or found.st_size > limit:
        os.close(descriptor)
        raise OSError(errno.EINVAL, f"{relative} is not a regular file of at most {limit >> 20} MiB")
    return descriptor


def copy_in(source: int, folder: int, name: str, limit: int) -> str:
    """Copy the open regular file `source` to `name` in the folder descriptor `folder` (replacing what was there,
    link or not, by a rename); at most `limit` bytes are read. Returns the copy's SHA-256."""
    partial = f".{name}.{os.getpid()}.{threading.get_ident()}"
    target = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                     dir_fd=folder)
    hashed, copied = hashlib.sha256(), 0
    try:
        while block := os.read(source, 1 << 20):
            copied += len(block)
            if copied > limit:
                raise OSError(errno.EFBIG, f"{name} grew past {limit >> 20} MiB while it was copied")
            hashed.update(block)
            os.write(target, block)
        os.fchmod(target, 0o644)
    except BaseException:
        os.close(target)
        os.unlink(partial, dir_fd=folder)
        raise
    os.close(target)
    os.replace(partial, name, src_dir_fd=folder, dst_dir_fd=folder)
    return hashed.hexdigest()


def install(scratch: int, relative: str, entry: int, entry_path: str | os.PathLike[str], mode: str, name: str,
            limit: int) -> Done:
    """Copy the library a builder left at `relative` in its scratch folder (`scratch`, a descriptor kept past its
    end) into the entry (`entry`, a descriptor; at `entry_path`) as `<mode>/<name>.so`, then record it in
    dice.done. OSError when the builder left no regular file there, or one over `limit` bytes."""
    if mode not in MODES:
        raise ValueError(f"unknown build mode {mode!r}")
    source = open_beneath(scratch, relative, limit)
    try:
        folder = open_folder(entry, mode, Path(entry_path) / mode)
        try:
            sha = copy_in(source, folder, f"{name}.so", limit)
        finally:
            os.close(folder)
    finally:
        os.close(source)
    done = Done(mode, library_path(entry_path, mode, name), sha)
    _write_done(entry, done)
    return done


def _write_done(entry: int, done: Done) -> None:
    partial = f".{DONE}.{os.getpid()}.{threading.get_ident()}"
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=entry)
    try:
        os.write(descriptor, f"{done.mode}\n{done.library}\n{done.sha256}\n".encode())
    finally:
        os.close(descriptor)
    os.replace(partial, DONE, src_dir_fd=entry, dst_dir_fd=entry)


def read_done_at(entry: int, entry_path: str | os.PathLike[str], name: str) -> Done | None:
    """The entry's record, read by the caller through its descriptor: only when it names the library where the
    caller puts it and that library still has the recorded hash."""
    try:
        descriptor = open_beneath(entry, DONE, _DONE_BYTES)
        try:
            mode, library, sha = os.read(descriptor, _DONE_BYTES).decode().split("\n")[:3]
        finally:
            os.close(descriptor)
        if mode not in MODES or library != library_path(entry_path, mode, name):
            return None
        descriptor = open_beneath(entry, f"{mode}/{name}.so", 1 << 40)
        try:
            return Done(mode, library, sha) if _hash(descriptor) == sha else None
        finally:
            os.close(descriptor)
    except (OSError, ValueError, UnicodeDecodeError):
        return None


class BuildLock:
    """An exclusive lock on one folder of the cache (an entry, or the shared header's): an flock on its dice.lock,
    opened through the folder's descriptor (or its path, the caller's own), which the kernel frees when its holder
    dies. Each acquire opens the file anew, so two threads of one process exclude each other too."""

    def __init__(self, folder: int | str | os.PathLike[str], shown: str | os.PathLike[str] = "") -> None:
        self.folder = folder
        self.shown = shown or folder
        self.descriptor: int | None = None

    def acquire(self, timeout: float | None = None, cancel: threading.Event | None = None) -> None:
        if isinstance(self.folder, int):
            parent = self.folder
        else:
            parent = os.open(self.folder, _DIRECTORY)
        try:
            descriptor = os.open(OWN_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                                 dir_fd=parent)
        finally:
            if parent is not self.folder:
                os.close(parent)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if cancel is not None and cancel.is_set():
                    os.close(descriptor)
                    raise HarnessError("cancelled", "cancelled") from None
                if deadline is not None and time.monotonic() >= deadline:
                    os.close(descriptor)
                    raise TimeoutError(f"build folder {self.shown} stayed locked for {timeout:.0f} s") from None
                time.sleep(0.05)
        self.descriptor = descriptor

    def release(self) -> None:
        if self.descriptor is not None:
            os.close(self.descriptor)  # closing the last descriptor of the open file frees its flock
            self.descriptor = None

    def __enter__(self) -> BuildLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:  # a lock dropped unreleased is freed with its object, as filelock's are
        self.release()
