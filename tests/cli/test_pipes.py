"""The CLI as shell users pipe it: a reader that stops early (`| head`) ends the command quietly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_closed_pipe_is_not_a_traceback(tmp_path):
    # `true` exits at once, long before the command has started, so its first print meets a closed pipe.
    command = f"{sys.executable} -m dice_lsp data tasks {tmp_path / 'tasks.jsonl'} --count 40 | true"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 141
