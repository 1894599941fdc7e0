"""Adversarial candidates against the limits (THREATS: exhaust, harm the user): memory spread over several processes,
a scratch space filled to its cap, and the cgroups a check makes, which must not outlive it. They run for real in
CPU mode with the shared C++-only fixture.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dice_lsp.harness import cgroups, check

pytestmark = pytest.mark.slow

ROOT_CALLER = pytest.mark.skipif(os.geteuid() != 0, reason="only a root caller (or a delegated hierarchy) may make "
                                                            "cgroups; elsewhere the report says none holds")



SPREAD = '''
import subprocess, sys, time
CHILD = """
import sys, time
block = bytearray({size})
for i in range(0, len(block), 4096):
    block[i] = 1
print("held", flush=True)
time.sleep(600)
"""
children = [subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True) for _ in range(3)]
held = sum(child.stdout.readline().strip() == "held" for child in children)
for child in children:
    child.kill()
    child.wait()
if held == 3:
    raise RuntimeError("ESCAPED: three children held {size} bytes each at once")
'''


@ROOT_CALLER
def test_memory_spread_over_processes_meets_one_cap(files, sandboxed):
    """Three children of 1.5 GiB each, none over the 4 GiB each process may address: together with the worker they
    are over the worker's one memory cap, so not all three hold their memory at once."""
    prelude = SPREAD.replace("{size}", str(3 << 29))
    report = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)", prelude),
                   sandboxed.with_(memory_limit_gb=4.0))
    assert "ESCAPED" not in report.message + (report.log or ""), report.message
    assert report.status in ("correct", "crashed"), (report.status, report.message)
    if report.status == "crashed":  # the kernel chose the worker itself: the report says why
        assert "memory cap" in report.message, report.message
    assert "memory-uncapped" not in [f.code for f in report.findings]


@ROOT_CALLER
def test_no_cgroup_outlives_the_caller(files, sandboxed, tmp_path):
    """A caller that checks (builds too) and exits leaves none of its cgroups behind, in any hierarchy."""
    script = tmp_path / "caller.py"
    script.write_text(
        "import os, sys\nfrom dice_lsp.harness import Options, check\n"
        "print(os.getpid(), flush=True)\n"
        "for _ in range(2):\n"
        "    report = check(open(sys.argv[1]).read(), open(sys.argv[2]).read(), Options.from_dict(eval(sys.argv[3])))\n"
        "    print(report.status, flush=True)\n")
    (tmp_path / "reference.py").write_text(files.text("add_reference.py"))
    (tmp_path / "solution.py").write_text(files.solution("return self.ext.add_values(a, b)"))
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "reference.py"), str(tmp_path / "solution.py"),
                           repr(sandboxed.to_dict())], capture_output=True, text=True)
    pid, *statuses = done.stdout.split()
    assert statuses == ["correct", "correct"], done.stderr[-2000:]
    assert cgroups.leftovers(int(pid)) == []


FILL = '''
import os, tempfile
path = os.path.join(tempfile.gettempdir(), "fill")
try:
    with open(path, "wb") as handle:
        while True:
            handle.write(b"x" * (1 << 20))
except OSError:
    pass
'''


def test_a_full_scratch_is_said_as_such(files, sandboxed):
    """The candidate takes all of its /tmp at import; the outputs its worker saves there then fail to write, and the
    report says the scratch was full instead of torch's "inline_container.cc ... unexpected pos"."""
    report = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)", FILL),
                   sandboxed.with_(scratch_limit_mb=64))
    assert report.status == "crashed", (report.status, report.message)
    assert report.message.startswith("the candidate filled its scratch space (64 MiB)"), report.message
    assert "scratch-full" in [f.code for f in report.findings]
