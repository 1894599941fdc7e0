"""What passes between a check's two workers, through the caller: the reference's input recipe to the solution's
worker, and the solution's outputs (files, or CUDA's shared-memory files for IPC) over to the reference's folder.
The solution's worker controls what it wrote, so only regular files are taken, never through a link.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import stat
from pathlib import Path

from dice_lsp.harness import sandbox
from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.options import Options
from dice_lsp.harness.process import Worker


def input_recipe(reference: str) -> str:
    """The reference's file without its class Model: what the solution's worker needs to make the trial inputs
    (imports, constants, helpers, get_inputs, get_init_inputs) and nothing of the op it must compute. A reference
    that does not parse is returned as it is (the check has refused it before this is asked)."""
    try:
        tree = ast.parse(reference)
    except SyntaxError:
        return reference
    tree.body = [node for node in tree.body if not (isinstance(node, ast.ClassDef) and node.name == "Model")]
    return ast.unparse(tree) + "\n"



OUTPUTS = ("outputs.pt", "outputs.json")
SHARED_FILES = 64  # at most this many of a solution's /dev/shm files are handed over
# What CUDA and torch share as PID 1: torch_<pid>_<n>, and cuda.shm.<id>.<pid>.<n>, whose fields are hexadecimal (a
# pattern of decimal digits matches root's, and would miss any name with a letter in it)
_SHARED_NAME = re.compile(r"(cuda\.shm\.[0-9a-f]+\.1\.[0-9a-f]+|torch_1_\d+_\d+)")


def hand_shared(solution: Worker, reference: Worker) -> None:
    """Before the reference worker opens the outputs the solution's worker shared by CUDA IPC: copy the files CUDA's
    driver and torch wrote for them into the solution's own /dev/shm over to the reference's (each sandbox has its
    own; the driver looks for the sharing process's file by its PID, 1, in the opener's /dev/shm). Only regular
    files with those names, as small as that tmpfs; the reference, PID 2 in its sandbox, has none by those names."""
    if not (solution.sandboxed and reference.sandboxed):
        return
    source_dir = Path(f"/proc/{solution.child_pid}/root{sandbox.SHM}")
    target_dir = Path(f"/proc/{reference.child_pid}/root{sandbox.SHM}")
    try:
        names = sorted(n for n in os.listdir(source_dir) if _SHARED_NAME.fullmatch(n))[:SHARED_FILES]
    except OSError:
        return
    for name in names:
        try:
            if _copy_regular(source_dir / name, target_dir / name, sandbox.SHM_MB << 20) and reference.user:
                os.chown(target_dir / name, reference.user, reference.user)  # the driver opens it to write
        except OSError:
            continue


def take_outputs(solution: Worker, exchange: str, options: Options) -> None:
    """Copy the outputs the solution's worker wrote into its scratch folder over to the reference's folder.
    The candidate controls that folder, so only regular files are read (never a link it planted to a file of the
    user's), no larger than a worker may write; stale copies in the exchange go first."""
    for name in OUTPUTS:
        (Path(exchange) / name).unlink(missing_ok=True)
    for name in OUTPUTS:
        if _copy_regular(Path(solution.scratch) / name, Path(exchange) / name, options.file_size_limit_mb << 20) \
                is False:
            raise HarnessError(f"the solution's {name} is not a regular file of at most "
                               f"{options.file_size_limit_mb} MiB", "died")


def _copy_regular(source: Path, target: Path, limit: int) -> bool | None:
    """Copy `source`, a path the candidate controls, to `target` (replaced): only a regular file (never a link it
    planted to a file of the user's, never a pipe) of at most `limit` bytes. None: there is no such file; False:
    there is, and it is not that."""
    try:
        handle = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        found = os.fstat(handle)
        if not stat.S_ISREG(found.st_mode) or found.st_size > limit:
            return False
        target.unlink(missing_ok=True)
        with open(handle, "rb", closefd=False) as reader, open(target, "xb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)
        return True
    finally:
        os.close(handle)


STAGED = "staged.bin"  # where a watched round's worker stages each timed call's outputs, in its own scratch


def take_staged(worker: Worker, size: int, target: Path) -> str:
    """Copy the first `size` bytes of the outputs `worker` staged (`timing.Staging`) to `target`, the caller's own
    copy: "" when taken, else why not. The worker waits for the caller's answer meanwhile; the file is its, so only a
    regular file, never through a link, at least `size` bytes long."""
    try:
        handle = os.open(Path(worker.scratch) / STAGED, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        return f"its staged outputs could not be opened ({error.strerror})"
    try:
        found = os.fstat(handle)
        if not stat.S_ISREG(found.st_mode) or found.st_size < size:
            return f"its staged outputs are not a regular file of at least {size} bytes"
        target.unlink(missing_ok=True)
        with open(handle, "rb", closefd=False) as reader, open(target, "xb") as writer:
            left = size
            while left:
                block = reader.read(min(left, 1 << 20))
                if not block:
                    return "its staged outputs ended early"
                writer.write(block)
                left -= len(block)
        return ""
    finally:
        os.close(handle)
