"""The server as a process, through a raw JSON-RPC client that sends exactly what a test writes: invalid params get an
error answer, reference links to devices and FIFOs never stall it, `serve` takes --stdio, --tcp, --port and
--log-file, and SIGINT / SIGTERM (Ctrl-C on a terminal too) end it with no process it started left alive."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dice_lsp import __version__

SERVER_FILES = Path(__file__).parent / "files"
PROBLEM = (SERVER_FILES / "relu.py").read_text()
SOLUTION = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''
SERVE = [sys.executable, "-m", "dice_lsp"]


class Wire:
    """One end of an LSP connection, framed by hand. Requests from the server are answered as a plain client would:
    `workspace/configuration` with `settings`, anything else with null."""

    def __init__(self, read, write, settings: dict | None = None) -> None:
        self.read, self.write, self.settings = read, write, settings or {}
        self.notifications: list[dict] = []

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def receive(self) -> dict:
        length = None
        while True:
            line = self._line()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        assert length is not None, "the server closed the connection"
        body = b""
        while len(body) < length:
            chunk = self.read(length - len(body))
            assert chunk, "the server closed the connection"
            body += chunk
        return json.loads(body)

    def _line(self) -> bytes:
        line = b""
        while not line.endswith(b"\n"):
            byte = self.read(1)
            if not byte:
                return line
            line += byte
        return line

    def next(self, predicate) -> dict:
        """The next message that `predicate` accepts (notifications on the way are kept; requests answered)."""
        while True:
            message = self.receive()
            if "method" in message and "id" in message:
                result = [self.settings] if message["method"] == "workspace/configuration" else None
                self.send({"id": message["id"], "result": result})
            elif "method" in message:
                self.notifications.append(message)
            if predicate(message):
                return message

    def request(self, number: int, method: str, params) -> dict:
        self.send({"id": number, "method": method, "params": params})
        return self.next(lambda message: message.get("id") == number and "method" not in message)

    def initialize(self, capabilities: dict | None = None, options: dict | None = None) -> dict:
        answer = self.request(0, "initialize", {"processId": os.getpid(), "rootUri": None,
                                                "capabilities": capabilities or {},
                                                "initializationOptions": options})
        self.send({"method": "initialized", "params": {}})
        return answer

    def open(self, path: Path, text: str) -> None:
        self.send({"method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": path.as_uri(), "languageId": "python", "version": 1, "text": text}}})

    def diagnostics(self, path: Path) -> list[dict]:
        uri = path.as_uri()
        message = self.next(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                            and m["params"]["uri"] == uri)
        return message["params"]["diagnostics"]

    def end(self) -> None:
        self.request(99, "shutdown", None)
        self.send({"method": "exit"})


@pytest.fixture
def served():
    """A server on stdio and a Wire to it; the server is ended when the test is."""
    started = []

    def start(*arguments: str, settings: dict | None = None, **popen) -> tuple[subprocess.Popen, Wire]:
        process = subprocess.Popen([*SERVE, *arguments], stdin=subprocess.PIPE, stdout=subprocess.PIPE, **popen)
        started.append(process)

        def write(data: bytes) -> None:
            process.stdin.write(data)
            process.stdin.flush()
        return process, Wire(process.stdout.read, write, settings)

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_request_with_invalid_params_gets_an_invalid_params_error(served, tmp_path):
    process, wire = served("--stdio")  # what VS Code's client adds for a stdio transport
    wire.initialize()
    answer = wire.request(1, "textDocument/hover", {"textDocument": 5, "position": {"line": "x"}})
    assert answer["error"]["code"] == -32602
    message = answer["error"]["message"]  # each wrong field, named as the client wrote it
    assert message.startswith("invalid params for textDocument/hover:") and "$.params.textDocument" in message
    assert "$.params.position.line" in message and "$.params.position.character" in message
    answer = wire.request(2, "workspace/executeCommand", {"command": "dice.server.benchmark", "arguments": []})
    assert answer["error"]["code"] == -32602 and "Expected 1 arguments, got 0" in answer["error"]["message"]
    # ... and the server goes on answering
    path = tmp_path / "relu.py"
    path.write_text(PROBLEM)
    wire.open(path, PROBLEM)
    assert wire.diagnostics(path) == []
    assert wire.request(3, "textDocument/hover", {"textDocument": {"uri": path.as_uri()},
                                                  "position": {"line": 0, "character": 0}})["result"] is None
    wire.end()
    assert process.wait() == 0


def test_reference_links_to_devices_and_fifos_are_refused_and_the_server_answers_on(served, tmp_path):
    """/dev/stdin (the server's own LSP input), a FIFO no one writes and /dev/zero: each link is refused with its
    reason, at once, in a trusted workspace too, and the server answers every other request meanwhile."""
    fifo = tmp_path / "problem.fifo"
    os.mkfifo(fifo)
    process, wire = served(settings={"trustedWorkspace": True, "device": "cpu"})
    wire.initialize({"workspace": {"configuration": True}})
    for number, target in enumerate(["/dev/stdin", str(fifo), "/dev/zero"], start=1):
        path = tmp_path / f"linked_{number}.py"
        text = f"# dice: reference = {target}\n{SOLUTION}"
        path.write_text(text)
        wire.open(path, text)
        [missing] = [d for d in wire.diagnostics(path) if d["code"] == "no-reference"]
        assert missing["message"] == f"the linked reference {target} cannot be read: {target} is not a regular file"
        answer = wire.request(number * 10, "workspace/executeCommand", {"command": "dice.server.benchmark",
                                                                        "arguments": [path.as_uri()]})
        assert answer["result"] == {"started": False, "message": missing["message"]}
        hover = wire.request(number * 10 + 1, "textDocument/hover", {"textDocument": {"uri": path.as_uri()},
                                                                     "position": {"line": 0, "character": 0}})
        assert hover["result"] is None
    resident = int(re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{process.pid}/status").read_text()).group(1))
    assert resident < 1 << 20, f"the server holds {resident} kB"  # nothing of /dev/zero was read
    wire.end()
    assert process.wait() == 0


def test_serve_on_tcp_serves_one_client_and_logs_to_a_file(tmp_path):
    log = tmp_path / "server.log"
    process = subprocess.Popen([*SERVE, "serve", "--port", "0", "--log-file", str(log)], stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL)
    try:
        line = process.stderr.readline().decode()
        found = re.match(r"dice-lsp: language server listening on 127\.0\.0\.1:(\d+) for one client", line)
        assert found, line
        with socket.create_connection(("127.0.0.1", int(found.group(1)))) as connection:
            stream = connection.makefile("rb")
            wire = Wire(stream.read, connection.sendall)
            assert "inlayHintProvider" in wire.initialize()["result"]["capabilities"]
            wire.end()
        assert process.wait() == 0
    finally:
        process.kill()
    assert f"dice_lsp INFO dice-lsp {__version__} serving (pid {process.pid})" in log.read_text()
    assert process.stderr.read() == b""  # the log went to the file, not to stderr


def test_serve_rejects_a_malformed_tcp_address():
    result = subprocess.run([*SERVE, "serve", "--tcp", "localhost"], capture_output=True, text=True)
    assert result.returncode == 2 and "expected HOST:PORT" in result.stderr


def test_a_taken_port_or_an_unwritable_log_is_one_line_and_status_2(tmp_path):
    """What a user gets wrong when starting the server by hand is said as every command says it, not a traceback."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run([*SERVE, "serve", "--port", str(port)], capture_output=True, text=True,
                                stdin=subprocess.DEVNULL)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"dice-lsp serve: cannot listen on 127.0.0.1:{port}: "), result.stderr
    missing = tmp_path / "no such folder" / "server.log"
    result = subprocess.run([*SERVE, "serve", "--log-file", str(missing)], capture_output=True, text=True,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr == f"dice-lsp serve: cannot write the log to {missing}: No such file or directory\n"


def descendants(root: int) -> dict[int, str]:
    """pid -> command line of every process under `root`, read from /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(text[text.rfind(")") + 2:].split()[1])
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                try:
                    found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                frontier.append(pid)
    return found


def alive(pid: int, command: str) -> bool:
    """Whether `pid` still runs the process it ran (not ended, not a zombie, not reused for another command)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        now = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return state != "Z" and now == command


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_server_checks_workers_and_generation_with_it(served, tmp_path, tiny_model_dir, stop):
    """A check whose solution hangs at import and a generation that decodes on, both running: SIGTERM or SIGINT
    ends the server (128 + the signal's number), and no process it started outlives it."""
    (tmp_path / "relu.py").write_text(PROBLEM)
    hung = tmp_path / "relu_dice.py"
    hanging = tmp_path / "hanging"  # made by the solution's import, just before it hangs there
    text = (f"# dice: reference = relu.py\nimport pathlib, time\npathlib.Path({str(hanging)!r}).touch()\n"
            f"time.sleep(3600)\n{SOLUTION}")
    hung.write_text(text)
    # Without the sandbox: a sandboxed worker would die with the server anyway (bubblewrap's --die-with-parent)
    settings = {"trustedWorkspace": True, "device": "cpu", "runTimeout": 3600, "model": str(tiny_model_dir),
                "decoding": {"maxNewTokens": 100000, "steps": 4}, "sandbox": "off"}
    process, wire = served(settings=settings, stderr=subprocess.PIPE)
    wire.initialize({"workspace": {"configuration": True}, "window": {"workDoneProgress": True}})
    wire.open(hung, text)
    wire.diagnostics(hung)
    assert wire.request(1, "workspace/executeCommand", {"command": "dice.server.benchmark",
                                                        "arguments": [hung.as_uri()]})["result"]["started"] is True
    problem = tmp_path / "relu.py"
    wire.send({"id": 2, "method": "workspace/executeCommand",
               "params": {"command": "dice.server.generate", "arguments": [problem.as_uri()]}})
    # Decoding is under way once its progress reports a block; the check's workers once they show in /proc
    wire.next(lambda m: m.get("method") == "$/progress" and "tokens" in m["params"]["value"].get("message", ""))
    while not hanging.exists():  # no event says a process reached a line: the server's answers pace the looking
        wire.request(3, "textDocument/hover", {"textDocument": {"uri": hung.as_uri()},
                                               "position": {"line": 0, "character": 0}})
    started = descendants(process.pid)
    assert any("dice_lsp.harness.worker" in command for command in started.values()), started  # the check's
    assert any("multiprocessing" in command for command in started.values()), started  # the generation child
    process.send_signal(stop)
    assert process.wait() == 128 + stop
    errors = process.stderr.read().decode()
    assert "Traceback" not in errors and "leaked" not in errors, errors
    left = dict(started)
    while left:  # a killed process is gone within moments; one that was not stays (pytest's timeout ends the wait)
        time.sleep(0.05)
        left = {pid: command for pid, command in left.items() if alive(pid, command)}


@pytest.mark.timeout(300)
def test_on_a_terminal_serve_says_what_it_waits_for_and_ctrl_c_ends_it(tmp_path):
    pid, terminal = pty.fork()
    if pid == 0:  # the child: the server, with the pseudo-terminal as its controlling terminal
        os.execv(sys.executable, [*SERVE, "serve"])
    said = b""
    while b"Ctrl-C stops it" not in said:
        said += os.read(terminal, 1024)
    assert b"dice-lsp: language server on stdio, waiting for an editor to speak LSP; Ctrl-C stops it" in said
    os.write(terminal, b"\x03")  # Ctrl-C: the terminal sends SIGINT to the server's process group
    _, status = os.waitpid(pid, 0)
    rest = b""
    try:
        while chunk := os.read(terminal, 1024):
            rest += chunk
    except OSError:  # the terminal closed with the server
        pass
    os.close(terminal)
    assert os.waitstatus_to_exitcode(status) == 130 and b"Traceback" not in rest, rest
