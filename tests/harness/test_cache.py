"""The build cache: its lock ends with its holder, torch's ownerless lock left by a killed build is cleared, and an
entry whose library changed after it was recorded is never loaded."""

import signal
import subprocess
import sys
import textwrap
import threading

from dice_lsp.harness.cache import BuildLock, clean_stale_locks, read_done, write_done

HOLD = textwrap.dedent("""
    import sys, time
    from dice_lsp.harness.cache import BuildLock
    lock = BuildLock(sys.argv[1])
    lock.acquire()
    print("held", flush=True)
    time.sleep(600)
""")


def hold_then_kill(directory) -> None:
    """A build that takes our lock and torch's (a FileBaton writes `plain/lock`), then is killed."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(directory)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    (directory / "plain").mkdir()
    (directory / "plain" / "lock").write_text("")
    holder.send_signal(signal.SIGKILL)
    holder.wait()


def test_the_lock_of_a_killed_build_is_free_and_torchs_lock_goes(tmp_path):
    hold_then_kill(tmp_path)
    taken = threading.Event()

    def take() -> None:
        with BuildLock(tmp_path):
            taken.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    thread.join(timeout=60)  # a bound on a hang only: the lock is free at once
    assert taken.is_set()
    assert not (tmp_path / "plain" / "lock").exists()


def test_a_held_lock_waits(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        try:
            BuildLock(tmp_path).acquire(timeout=0.2)
        except TimeoutError:
            pass
        else:
            raise AssertionError("took a lock another process holds")
    finally:
        holder.kill()
        holder.wait()


def test_clean_stale_locks_finds_torchs_lock_where_torch_puts_it(tmp_path):
    stale, live = tmp_path / "a", tmp_path / "b"
    stale.mkdir()
    hold_then_kill(stale)
    live.mkdir()
    with BuildLock(live):
        (live / "plain").mkdir()
        (live / "plain" / "lock").write_text("")  # torch's, of the build running under our lock
        assert clean_stale_locks(tmp_path) == [stale]
        assert (live / "plain" / "lock").exists()  # its build is running
    assert not (stale / "plain" / "lock").exists()


def test_a_changed_library_is_not_loaded(tmp_path):
    library = tmp_path / "ext.so"
    library.write_bytes(b"\x7fELF built")
    write_done(tmp_path, "plain", str(library))
    assert read_done(tmp_path).library == str(library)
    library.write_bytes(b"\x7fELF replaced")
    assert read_done(tmp_path) is None


TORCH_BUILD = textwrap.dedent("""
    import sys
    from torch.utils.cpp_extension import load_inline
    load_inline("dice_baton", cpp_sources=["int dice_baton() { return 1; }"], functions=["dice_baton"],
                build_directory=sys.argv[1])
""")


def test_torchs_own_baton_is_found_after_a_killed_build(tmp_path):
    """torch's load_inline, killed while it builds into `<entry>/plain` as ours do, leaves its FileBaton there;
    the clean-up finds it (it used to look in `<entry>/lock`)."""
    plain = tmp_path / "entry" / "plain"
    plain.mkdir(parents=True)
    build = subprocess.Popen([sys.executable, "-c", TORCH_BUILD, str(plain)], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not (plain / "lock").exists():  # torch takes its baton before it compiles (tens of seconds here)
            assert build.poll() is None, "the build ended before its baton was seen"
            threading.Event().wait(0.05)
    finally:
        import os

        os.killpg(build.pid, signal.SIGKILL)
        build.wait()
    assert (plain / "lock").exists()
    assert clean_stale_locks(tmp_path) == [tmp_path / "entry"]
    assert not (plain / "lock").exists()
