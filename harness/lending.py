"""Folders lent to a sandboxed worker's unprivileged user while it writes them (the reference's compile caches), taken
back when it ends. Builders borrow nothing: they write only their own scratch tmpfs (`harness.builder`).
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading

_lock = threading.Lock()
_lent_now: collections.Counter[str] = collections.Counter()  # folders lent now, by how many builds


@contextlib.contextmanager
def lent(folders: list[str], user: int):
    """`folders`, with all they hold, owned by `user` while a worker running as it writes them, then the caller's
    again, so nothing outside a worker's life may write them as that user. Overlapping builds share a folder (the
    shared precompiled header) until the last one ends. Nothing to do when `user` is 0."""
    if not user:
        yield
        return
    with _lock:
        for folder in folders:
            if not _lent_now[folder]:
                _chown_tree(folder, user, user)
            _lent_now[folder] += 1
    try:
        yield
    finally:
        with _lock:
            for folder in folders:
                _lent_now[folder] -= 1
                if not _lent_now[folder]:
                    del _lent_now[folder]
                    _chown_tree(folder, os.getuid(), os.getgid())


def _chown_tree(folder: str, uid: int, gid: int) -> None:
    """Every file and folder under `folder`, and itself, to uid:gid, through folder descriptors: links are changed
    themselves, never followed, and a `folder` that is itself a link is left as it is."""
    for _top, dirs, files, descriptor in os.fwalk(folder, follow_symlinks=False):
        os.chown(descriptor, uid, gid)
        for name in dirs + files:
            try:
                os.chown(name, uid, gid, dir_fd=descriptor, follow_symlinks=False)
            except FileNotFoundError:
                continue
