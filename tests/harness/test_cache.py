"""The build lock: a lock whose owner died is taken over, torch's ownerless lock with it."""

import os
import subprocess
import sys

from dice_lsp.harness.cache import BuildLock, clean_stale_locks


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_lock_of_a_dead_owner_is_taken_over(tmp_path):
    (tmp_path / "dice.lock").write_text(f"{dead_pid()}\n")
    (tmp_path / "lock").write_text("")
    with BuildLock(tmp_path) as lock:
        assert lock.path.read_text().strip() == str(os.getpid())
        assert not (tmp_path / "lock").exists()
    assert not (tmp_path / "dice.lock").exists()


def test_clean_stale_locks(tmp_path):
    stale, live = tmp_path / "a", tmp_path / "b"
    stale.mkdir()
    live.mkdir()
    (stale / "dice.lock").write_text(f"{dead_pid()}\n")
    (stale / "lock").write_text("")
    (live / "dice.lock").write_text(f"{os.getpid()}\n")
    assert clean_stale_locks(tmp_path) == [stale]
    assert not (stale / "lock").exists() and (live / "dice.lock").exists()
