"""The builder seen from the caller: each build a candidate's worker asks for is made by a builder worker of its own,
in the builder's own scratch space; once the builder has ended, the caller copies the library into the cache.

The builder is as untrusted as the candidate's worker: it compiles the candidate's text. So the call is checked here
before anything touches the disk (`admission`), a builder may write nothing outside its sandbox's scratch tmpfs (the
shared precompiled header is only read, and only by builds without flags of the candidate's), and the caller's file
operations never go through a path a worker could shape: the entry is a folder the caller makes directly in the
cache's root, and what it copies out of the scratch is opened one component at a time, never through a link
(`cache.install`). No file is ever chowned for a builder.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

from dice_lsp.harness import admission, cache, light, messages
from dice_lsp.harness.build import Call, Extension
from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.options import Options
from dice_lsp.harness.process import Worker

HEADERS = "pch"  # the cache's folder of shared precompiled headers, one folder per compiler and flags
_SCRATCH_BUILD = "build"  # where a builder builds, in its scratch
_SCRATCH_PREPARE = "prepare"


def serve_builds(worker: Worker, options: Options, timeout: float, cancel: threading.Event | None = None,
                 extra_env: dict[str, str] | None = None) -> messages.Reply:
    """The answer to the Build sent to `worker`, serving on the way each build it asks for (`BuildRequest`) with a
    builder worker of its own: the candidate's worker cannot write the cache, the builder runs none of its code.
    A request the worker's own Builder would have refused came round it: HarnessError "refused", and the check ends."""
    deadline = time.monotonic() + timeout
    while True:
        reply = worker.receive(max(0.0, deadline - time.monotonic()), cancel, "build")
        if not isinstance(reply, messages.BuildRequest):
            return reply
        why = admission.refusal(reply.call, reply.mode)
        if why:
            worker.kill()
            raise HarnessError(f"the solution's worker asked, round its own load_inline, for a build the harness "
                               f"refuses: {why}", "refused")
        made = build_entry(reply.call, reply.mode, options, max(0.0, deadline - time.monotonic()), cancel, extra_env)
        worker.answer(messages.BuildAnswer(extension=made))


def build_entry(call: Call, mode: str, options: Options, timeout: float, cancel: threading.Event | None = None,
                extra_env: dict[str, str] | None = None) -> Extension:
    """Make `call`'s cache entry: a builder worker compiles it in its scratch space; once it has ended, its library
    is copied into the entry, a folder made here directly in the cache's root. A builder that fails or dies is a
    failed build; a call `admission` refuses raises HarnessError "refused" before anything touches the disk."""
    why = admission.refusal(call, mode)
    if why:
        raise HarnessError(f"the solution asked for a build the harness refuses: {why}", "refused")
    root = Path(options.extensions_dir)
    entry_path = root / call.entry
    started = time.monotonic()
    failed = Extension(call.name, call.key, str(entry_path), with_cuda=bool(call.cuda), mode=mode or "plain")
    root_fd = cache.open_root(root)
    try:
        try:
            entry = cache.open_folder(root_fd, call.entry, entry_path)
        except HarnessError as error:
            failed.output = str(error)
            return failed
        try:
            lock = cache.BuildLock(entry, entry_path)
            lock.acquire(max(1.0, timeout), cancel)
            try:
                done = cache.read_done_at(entry, entry_path, call.name)
                if done is not None and (mode != "plain" or done.mode == "plain"):  # another check built it meanwhile
                    return Extension(call.name, call.key, str(entry_path), with_cuda=bool(call.cuda), mode=done.mode,
                                     cached=True, ok=True)
                header = _shared_header(call, mode, options, root_fd, timeout, cancel, extra_env)
                left = max(0.0, timeout - (time.monotonic() - started))
                made = _compile(call, mode, options, left, cancel, extra_env, entry, entry_path, header)
                if not header and _light_candidate(call, mode, options):  # a header builder started beside it
                    _await_header(options, max(0.0, timeout - (time.monotonic() - started)), cancel)
                return made
            finally:
                lock.release()
        finally:
            os.close(entry)
    except TimeoutError as error:
        failed.output = f"the build of {call.name!r} waited past its limit: {error}"
        return failed
    finally:
        os.close(root_fd)


def _compile(call: Call, mode: str, options: Options, timeout: float, cancel: threading.Event | None,
             extra_env: dict[str, str] | None, entry: int, entry_path: Path, header: str) -> Extension:
    builder = Worker(options, extra_env, warm=False, role="builder", readable=(header,) if header else ())
    scratch = -1
    failed = Extension(call.name, call.key, str(entry_path), with_cuda=bool(call.cuda), mode=mode or "plain")
    try:
        directory = f"{builder.inner_scratch}/{_SCRATCH_BUILD}"
        made = builder.call(messages.Compile(call=call, directory=directory, light_build=options.light_build,
                                             mode=mode, header=header), timeout, cancel)
        if isinstance(made, messages.Compiled) and made.extension.ok:
            scratch = builder.open_scratch()  # while it runs; what it holds stays readable after its end
    except HarnessError as error:
        if error.kind == "cancelled":
            raise
        failed.output = f"the build of {call.name!r} failed: {error}\n{error.log or ''}"
        return failed
    finally:
        builder.close(wait=True)  # ended, and its sandbox with it: nothing writes its scratch any more
    if isinstance(made, messages.Failed):
        failed.output = f"{made.error}\n{made.traceback}"
        return failed
    built = made.extension
    answer = Extension(call.name, call.key, str(entry_path), with_cuda=bool(call.cuda), mode=built.mode,
                       ok=False, seconds=built.seconds, output=built.output, light_error=built.light_error,
                       refused=built.refused)
    if scratch < 0:
        return answer
    try:
        if built.mode not in cache.MODES:
            answer.output += f"\nthe builder named an unknown build mode {built.mode!r}"
            return answer
        relative = f"{_SCRATCH_BUILD}/{built.mode}/{call.name}.so"
        cache.install(scratch, relative, entry, entry_path, built.mode, call.name, options.file_size_limit_mb << 20)
        answer.ok = True
    except OSError as error:
        answer.output += f"\nthe builder's library could not be taken into the cache: {error}"
    finally:
        os.close(scratch)
    return answer


def _light_candidate(call: Call, mode: str, options: Options) -> bool:
    """Whether a build of `call` would try the light path with the shared header."""
    return (options.light_build and mode != "plain" and bool(call.cuda) and call.python_module and call.plain_flags
            and not call.flags.get("no_implicit_headers"))


def _shared_header(call: Call, mode: str, options: Options, root_fd: int, timeout: float,
                   cancel: threading.Event | None, extra_env: dict[str, str] | None) -> str:
    """The shared header folder a build of plain flags may read ("" for any other build, or where it has no header
    yet). The first build that finds none starts `prepare_header` beside itself and makes a header of its own
    meanwhile (the overlap of nvcc and the header's g++ a build had when it made the shared one itself); builds that
    come while that runs wait for it, so a batch's first builds do not each make one."""
    if not _light_candidate(call, mode, options):
        return ""
    folder = Path(options.extensions_dir) / HEADERS
    try:
        headers = cache.open_folder(root_fd, HEADERS, folder)
    except HarnessError:
        return ""  # a link or another user's folder where it should be: the build makes a header of its own
    try:
        if _holds_a_header(headers):
            return str(folder)
        if str(folder) in _unprepared:
            return ""
        with _preparing_lock:
            running = _preparing.get(str(folder))
            if running is None:
                _preparing[str(folder)] = threading.Thread(target=_prepare_beside, args=(options, extra_env),
                                                           name="dice-prepare", daemon=True)
                _preparing[str(folder)].start()
        if running is None:
            return ""
        running.join(timeout)
        return str(folder) if _holds_a_header(headers) else ""
    finally:
        os.close(headers)


_unprepared: set[str] = set()  # header folders whose header could not be made in this process
_preparing: dict[str, threading.Thread] = {}  # header folders a prepare runs for now
_preparing_lock = threading.Lock()


def _await_header(options: Options, timeout: float, cancel: threading.Event | None) -> None:
    """Wait, at most `timeout` seconds and while not cancelled, for a header builder started for this cache: a
    one-shot caller (`dice-lsp check`) would otherwise exit, ending that builder, and leave the cache without it."""
    running = _preparing.get(str(Path(options.extensions_dir) / HEADERS))
    deadline = time.monotonic() + timeout
    while running is not None and running.is_alive() and time.monotonic() < deadline:
        if cancel is not None and cancel.is_set():
            return
        running.join(0.2)


def _prepare_beside(options: Options, extra_env: dict[str, str] | None) -> None:
    folder = str(Path(options.extensions_dir) / HEADERS)
    try:
        root_fd = cache.open_root(options.extensions_dir)
        try:
            headers = cache.open_folder(root_fd, HEADERS, folder)
            try:
                _prepare_locked(options, options.build_timeout, None, extra_env, headers, Path(folder),
                                only_if_missing=True)
            finally:
                os.close(headers)
        finally:
            os.close(root_fd)
    except (HarnessError, OSError):
        _unprepared.add(folder)  # not again in this process: each try is a worker and a probe
    finally:
        with _preparing_lock:
            _preparing.pop(folder, None)


def _holds_a_header(headers: int) -> bool:
    for name in os.listdir(headers):
        try:
            found = os.stat(f"{name}/{light.HEADER}.gch", dir_fd=headers, follow_symlinks=False)
        except OSError:
            continue
        if re.fullmatch(r"[0-9a-f]{16}", name) and found.st_size:
            return True
    return False


def prepare_header(options: Options, timeout: float | None = None, cancel: threading.Event | None = None,
                   extra_env: dict[str, str] | None = None) -> str:
    """Build the precompiled torch header that light builds of plain flags share, in a builder that compiles nothing
    of any candidate's, and copy it into `<cache>/pch/<key>/` once that builder has ended; returns its path there
    (at once, after the builder's probe, when it is there already). Raises HarnessError when it cannot be built (no
    CUDA toolkit, a compiler error) or the cache's header folder is not one the harness made."""
    root = Path(options.extensions_dir)
    timeout = options.build_timeout if timeout is None else timeout
    root_fd = cache.open_root(root)
    try:
        headers = cache.open_folder(root_fd, HEADERS, root / HEADERS)
        try:
            return _prepare_locked(options, timeout, cancel, extra_env, headers, root / HEADERS)
        finally:
            os.close(headers)
    finally:
        os.close(root_fd)


def _prepare_locked(options: Options, timeout: float, cancel: threading.Event | None,
                    extra_env: dict[str, str] | None, headers: int, headers_path: Path,
                    only_if_missing: bool = False) -> str:
    lock = cache.BuildLock(headers, headers_path)  # one prepare at a time: the next finds the header made
    lock.acquire(max(1.0, timeout), cancel)
    try:
        if only_if_missing and _holds_a_header(headers):
            return ""
        return _prepare(options, timeout, cancel, extra_env, headers, headers_path)
    finally:
        lock.release()


def _prepare(options: Options, timeout: float, cancel: threading.Event | None, extra_env: dict[str, str] | None,
             headers: int, headers_path: Path) -> str:
    worker = Worker(options, extra_env, warm=False, role="builder", readable=(str(headers_path),))
    made_in = f"{worker.inner_scratch}/{_SCRATCH_PREPARE}"
    scratch = -1
    try:
        answer = worker.call(messages.Prepare(cache_dir=made_in, header=str(headers_path)), timeout, cancel)
        if isinstance(answer, messages.Prepared):
            scratch = worker.open_scratch()
    finally:
        worker.close(wait=True)
    try:
        if isinstance(answer, messages.Failed):
            raise HarnessError(f"could not build the precompiled torch header: {answer.error}", "setup")
        if _header_key(answer.header, str(headers_path)):  # the shared folder holds it for these flags already
            return answer.header
        key = _header_key(answer.header, f"{made_in}/pch")
        if not key:
            raise HarnessError(f"the header's builder named an unexpected path {answer.header[:200]!r}", "setup")
        folder = cache.open_folder(headers, key, headers_path / key)
        try:
            for name in (f"{light.HEADER}.gch", light.HEADER):  # the header last: a build looks for the .gch beside it
                source = cache.open_beneath(scratch, f"{_SCRATCH_PREPARE}/pch/{key}/{name}",
                                            options.file_size_limit_mb << 20)
                try:
                    cache.copy_in(source, folder, name, options.file_size_limit_mb << 20)
                finally:
                    os.close(source)
        finally:
            os.close(folder)
    except OSError as error:
        raise HarnessError(f"the precompiled torch header could not be taken into the cache: {error}", "setup") \
            from error
    finally:
        if scratch >= 0:
            os.close(scratch)
    return str(headers_path / key / light.HEADER)


def _header_key(header: str, folder: str) -> str:
    """The key of `header` when it is `<folder>/<key>/dice_torch.h`; "" otherwise."""
    found = re.fullmatch(re.escape(folder) + r"/([0-9a-f]{16})/" + re.escape(light.HEADER), header)
    return found.group(1) if found else ""

