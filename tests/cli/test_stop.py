"""Ctrl-C and SIGTERM on real `dice-lsp` processes: the command says why it stopped, exits 130 / 143, and nothing it
started (harness workers, what the candidate spawned, compilers) is left running.

Each test waits for an event it can see from outside (a marked process of the candidate's, a compiler) before it
sends the signal, and records the command's whole process tree at that moment.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
HARNESS_FILES = ROOT / "tests" / "harness" / "files"
COMPILERS = {"cc1plus", "ninja", "c++", "g++", "gcc", "cc", "x86_64-linux-gnu-g++", "nvcc"}


def stat(pid: int) -> tuple[str, int, str] | None:
    """(state, parent pid, command name) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    head, rest = text[:text.rfind(")")], text[text.rfind(")") + 2:].split()
    return rest[0], int(rest[1]), head[head.find("(") + 1:]


def alive(pid: int) -> bool:
    found = stat(pid)
    return found is not None and found[0] != "Z"


def tree(root: int) -> dict[int, str]:
    """Every live descendant of `root`, by pid, with its command name."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (found := stat(int(entry))) is not None and found[0] != "Z":
            parents[int(entry)] = (found[1], found[2])
    out, frontier = {}, {root}
    while frontier:
        frontier = {pid for pid, (parent, _) in parents.items() if parent in frontier and pid not in out}
        out.update({pid: parents[pid][1] for pid in frontier})
    return out


def marked(mark: str) -> list[int]:
    """Processes whose command line or environment holds `mark`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or not alive(int(entry)):
            continue
        for name in ("cmdline", "environ"):
            try:
                if mark.encode() in Path(f"/proc/{entry}/{name}").read_bytes():
                    found.append(int(entry))
                    break
            except OSError:
                pass
    return found


def start(tmp_path: Path, mark: str, *argv: str) -> subprocess.Popen:
    env = {**os.environ, "DICE_LSP_TEST_MARK": mark}
    return subprocess.Popen([sys.executable, "-m", "dice_lsp", *argv], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(command: subprocess.Popen, seen, what: str) -> dict[int, str]:
    """Poll until `seen(tree)` holds (an event: no bound but the test's own timeout), failing at once when the
    command ends first; returns the process tree at that moment."""
    while True:
        found = tree(command.pid)
        if seen(found):
            return found
        if command.poll() is not None:
            out, err = command.communicate()
            pytest.fail(f"the command ended (status {command.returncode}) before {what}:\n{out}\n{err}")
        time.sleep(0.1)


def stop_and_check(command: subprocess.Popen, number: int, started: dict[int, str], mark: str) -> str:
    command.send_signal(number)
    out, err = command.communicate(timeout=300)
    assert command.returncode == 128 + number, (out, err)
    assert "Traceback" not in err, err
    left = {pid: name for pid, name in started.items() if alive(pid)}
    assert not left, f"still running after the command ended: {left}"
    assert not marked(mark), "a process of the command's is still running"
    return err


def solution(forward: str, prelude: str = "", cpp_comment: str = "") -> str:
    text = (HARNESS_FILES / "add_solution.py").read_text()
    text = text.replace("        return self.ext.FUNCTION(a, b)", "        " + forward)
    return prelude + text.replace('cpp_source = """\n', f'cpp_source = """\n// {cpp_comment}\n' if cpp_comment
                                  else 'cpp_source = """\n')


@pytest.mark.slow
def test_sigterm_during_a_forward_ends_every_worker_and_what_the_candidate_started(tmp_path):
    mark = f"dice-stop-test-{uuid.uuid4().hex}"
    (tmp_path / "ref.py").write_text((HARNESS_FILES / "add_reference.py").read_text())
    # The forward sleeps in a child of its own, marked so the test sees from outside when the forward runs
    sleeper = f'subprocess.run([sys.executable, "-c", "import time; time.sleep(3600)", "{mark}"])'
    (tmp_path / "sol.py").write_text(solution(f"{sleeper}; return self.ext.add_values(a, b)",
                                              "import subprocess\nimport sys\n"))
    command = start(tmp_path, mark, "check", "ref.py", "sol.py", "--device", "cpu", "--baseline", "none",
                    "--timing-trials", "0")
    started = wait_for(command, lambda found: any(mark in _cmdline(pid) for pid in found), "the forward ran")
    assert len(started) >= 3  # the workers (or their sandboxes) and the sleeper
    err = stop_and_check(command, signal.SIGTERM, started, mark)
    assert "dice-lsp check: stopped by SIGTERM; the processes it started are ended" in err


@pytest.mark.slow
def test_ctrl_c_during_a_build_ends_the_compilers(tmp_path):
    mark = f"dice-stop-test-{uuid.uuid4().hex}"
    (tmp_path / "ref.py").write_text((HARNESS_FILES / "add_reference.py").read_text())
    # A comment of its own: a build no other test has cached, so the compiler runs
    (tmp_path / "sol.py").write_text(solution("return self.ext.add_values(a, b)", cpp_comment=mark))
    command = start(tmp_path, mark, "check", "ref.py", "sol.py", "--device", "cpu", "--baseline", "none")
    started = wait_for(command, lambda found: COMPILERS & set(found.values()), "a compiler started")
    err = stop_and_check(command, signal.SIGINT, started, mark)
    assert "dice-lsp check: interrupted; the processes it started are ended" in err


@pytest.mark.slow
def test_sigterm_during_eval_batch_builds_ends_them(tmp_path):
    """eval builds every solution in parallel before checking (harness batch mode), which the harness cannot cancel
    yet: the command's reaper ends those builds too."""
    mark = f"dice-stop-test-{uuid.uuid4().hex}"
    for folder, text in (("problems/level1", (HARNESS_FILES / "add_reference.py").read_text()),
                         ("solutions/level1", solution("return self.ext.add_values(a, b)", cpp_comment=mark))):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "1_add.py").write_text(text)
    command = start(tmp_path, mark, "eval", "problems", "--solutions", "solutions", "--out", "out", "--device",
                    "cpu", "--baseline", "none", "--timing-trials", "0", "--quiet")
    started = wait_for(command, lambda found: COMPILERS & set(found.values()), "a compiler started")
    err = stop_and_check(command, signal.SIGTERM, started, mark)
    assert "dice-lsp eval: stopped by SIGTERM" in err


def test_an_orphan_in_a_session_of_its_own_is_adopted_and_ended(tmp_path):
    """ninja starts each compiler in a process group of its own, and a candidate may call setsid(): killing the
    parent's group leaves such a grandchild running, handed to init. The reaper makes the command their subreaper,
    so they come back to it as children and are ended too."""
    probe = (
        "import subprocess, sys\n"
        "from dice_lsp.commands.stop import Reaper\n"
        "parent = subprocess.Popen(['sh', '-c', 'setsid sleep 1000 & echo $!; wait'], stdout=subprocess.PIPE,\n"
        "                          start_new_session=True, text=True)\n"
        "grandchild = parent.stdout.readline().strip()\n"
        "print(grandchild, flush=True)\n"
        "while open(f'/proc/{grandchild}/stat').read().rsplit(')', 1)[1].split()[3] != grandchild:\n"
        "    pass  # until setsid() has run: the grandchild leads a session of its own\n"
        "reaper = Reaper()\n"
        "reaper.start()\n"
        "reaper.stop()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    grandchild = int(done.stdout.split()[0])
    try:
        assert not alive(grandchild), "the setsid grandchild outlived the stop"
    finally:
        if alive(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
