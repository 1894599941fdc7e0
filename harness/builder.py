"""The builder seen from the caller: each build a candidate's worker asks for is made by a builder worker of its own,
which alone writes that cache entry and runs no code of the candidate's.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from dice_lsp.harness import messages
from dice_lsp.harness.build import Call, Extension
from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.options import Options
from dice_lsp.harness.process import Worker


def serve_builds(worker: Worker, options: Options, timeout: float, cancel: threading.Event | None = None,
                 extra_env: dict[str, str] | None = None) -> messages.Reply:
    """The answer to the Build sent to `worker`, serving on the way each build it asks for (`BuildRequest`) with a
    builder worker of its own: the candidate's worker cannot write the cache, the builder runs none of its code."""
    deadline = time.monotonic() + timeout
    while True:
        reply = worker.receive(max(0.0, deadline - time.monotonic()), cancel, "build")
        if not isinstance(reply, messages.BuildRequest):
            return reply
        made = build_entry(reply.call, reply.mode, options, max(0.0, deadline - time.monotonic()), cancel, extra_env)
        worker.answer(messages.BuildAnswer(extension=made))


def build_entry(call: Call, mode: str, options: Options, timeout: float, cancel: threading.Event | None = None,
                extra_env: dict[str, str] | None = None) -> Extension:
    """Make `call`'s cache entry in a builder worker that may write only that entry (and, for a call without flags
    of the candidate's, the shared precompiled header). A builder that fails or dies is a failed build."""
    root = Path(options.extensions_dir)
    entry = call.directory(root)
    entry.mkdir(parents=True, exist_ok=True)
    writable = [str(entry)]
    if call.plain_flags:
        (root / "pch").mkdir(exist_ok=True)
        writable.append(str(root / "pch"))
    builder = Worker(options, extra_env, warm=False, role="builder", writable=tuple(writable))
    try:
        made = builder.call(messages.Compile(call=call, cache_dir=str(root), light_build=options.light_build,
                                             mode=mode), timeout, cancel)
    except HarnessError as error:
        if error.kind == "cancelled":
            raise
        return Extension(call.name, call.key, str(entry), with_cuda=bool(call.cuda), mode=mode or "plain",
                         output=f"the build of {call.name!r} failed: {error}\n{error.log or ''}")
    finally:
        builder.close(wait=True)  # ended, and its folders taken back
    if isinstance(made, messages.Failed):
        return Extension(call.name, call.key, str(entry), with_cuda=bool(call.cuda), mode=mode or "plain",
                         output=f"{made.error}\n{made.traceback}")
    return made.extension
