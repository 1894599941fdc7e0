"""Which problem a solution belongs to, and which of its CUDA sources is the core: one owner for each rule.

The server, the command line, the engine's infill and eval all ask here, so they can never disagree.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from dice_lsp.anatomy.types import Anatomy, Split

# A linked reference is a problem file a person wrote: a few kilobytes. The cap keeps a link to a huge file (or a
# device: /dev/zero, /dev/stdin) from being read at all.
MAX_REFERENCE_BYTES = 1 << 20

_TODO = re.compile(r"\bTODO\b|\bFIXME\b|\.\.\.", re.IGNORECASE)


@dataclass(frozen=True)
class Pairing:
    """A solution's reference: its text and path, or why there is none (`problem`)."""

    text: str | None
    path: Path | None
    problem: str | None = None


def find_reference(anatomy: Anatomy, path: Path | None) -> Pairing:
    """The reference of the file `anatomy` was read from (at `path`, None when unsaved): the problem named by its
    `# dice: reference = ...` link (relative to its folder) when it has one, since the user wrote it to say so;
    else the file itself when it defines `class Model`."""
    if anatomy.reference_link is None and anatomy.model is not None:
        return Pairing(anatomy.text, path)
    if anatomy.reference_link is None:
        return Pairing(None, None, "ModelNew has no reference: put `class Model` in this file or link the problem "
                                   "with a comment `# dice: reference = path/to/problem.py`")
    if path is None:
        return Pairing(None, None, "the reference link cannot be followed from an unsaved file")
    target = linked_path(anatomy.reference_link, path)
    try:
        return Pairing(read_reference(target), target)
    except OSError as error:
        return Pairing(None, target, f"the linked reference {target} cannot be read: {error.strerror or error}")


def linked_path(link: str, solution: Path) -> Path:
    """The path a link names, read relative to the solution's folder."""
    target = Path(link).expanduser()
    return target if target.is_absolute() else solution.parent / target


def read_reference(path: Path) -> str:
    """A reference file's text. Only a regular file up to MAX_REFERENCE_BYTES is read (never a FIFO, a device or
    a terminal, which could block or never end); anything else raises OSError with a reason a user can act on."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    descriptor = os.open(path, flags)  # non-blocking: opening a FIFO with no writer must not wait
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            raise OSError(f"{path} is not a regular file")
        if found.st_size > MAX_REFERENCE_BYTES:
            raise OSError(f"{path} is {found.st_size} bytes; a reference is at most {MAX_REFERENCE_BYTES} bytes")
        data = os.read(descriptor, MAX_REFERENCE_BYTES + 1)
    finally:
        os.close(descriptor)
    if len(data) > MAX_REFERENCE_BYTES:
        raise OSError(f"{path} grew past {MAX_REFERENCE_BYTES} bytes while it was read")
    return data.decode("utf-8", errors="replace")


def is_empty_core(split: Split) -> bool:
    """A CUDA source that is empty or only a TODO: a skeleton's place to infill."""
    value = split.source.value
    return not value.strip() or (_TODO.search(value) is not None and "__global__" not in value)


def infill_split(anatomy: Anatomy) -> Split | None:
    """The split *Infill* fills: the first whose CUDA source is empty or a TODO; None when there is none."""
    return next((split for split in anatomy.splits if is_empty_core(split)), None)


def core_split(anatomy: Anatomy) -> Split | None:
    """DICE's core of a file: the split *Infill* would fill when there is one, else the first CUDA source."""
    return infill_split(anatomy) or (anatomy.splits[0] if anatomy.splits else None)
