"""`dice-lsp generate` as a user meets it: wrong files refused before the model loads, a sample cut off by
--max-new-tokens never saved as a solution, identical greedy samples refused, progress on request, no tracebacks.

The engine is replaced at its seam (load, generate_kernel) where a test needs a given output; the last test decodes
with the tiny random model for real.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dice_lsp import engine
from dice_lsp.cli import main
from dice_lsp.engine import checkpoint
from dice_lsp.engine.generation import DecodeProgress, Draft, Generation

PROBLEM = Path(__file__).resolve().parents[1] / "harness" / "files" / "add_reference.py"
KERNEL = "import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


class FakeEngine:
    """load and generate_kernel as the engine offers them, returning the drafts a test asks for."""

    def __init__(self, *stops: str, code: str = KERNEL, fail: Exception | None = None) -> None:
        self.stops, self.code, self.fail = stops, code, fail
        self.loaded = False

    def load(self, model_ref, device="auto", dtype="auto"):
        if self.fail is not None:
            raise self.fail
        self.loaded = True
        return SimpleNamespace(device="cpu")

    def generate_kernel(self, reference, loaded, decoding, samples, infill_skeleton=None, seed=None, on_block=None):
        on_block(DecodeProgress(blocks=2, tokens=(8,) * samples, finished=0, seconds=0.5))
        return [Draft(Generation((1,) * 64, (0,) * 64, stop, "```python\n" + self.code), self.code)
                for stop in self.stops[:samples]]


@pytest.fixture
def fake(monkeypatch):
    def install(*stops: str, **more) -> FakeEngine:
        made = FakeEngine(*stops, **more)
        monkeypatch.setattr(engine, "load", made.load, raising=False)
        monkeypatch.setattr(engine, "generate_kernel", made.generate_kernel, raising=False)
        monkeypatch.setattr(checkpoint, "choose", lambda model: model or "bundled")
        return made

    return install


def test_a_sample_cut_off_by_max_new_tokens_is_not_saved(fake, tmp_path, capsys):
    fake("length")
    out = tmp_path / "solution.py"
    assert main(["generate", str(PROBLEM), "--out", str(out), "--max-new-tokens", "64"]) == 1
    assert not out.exists()
    assert "sample 1: cut off at --max-new-tokens 64 before the model finished (64 tokens); not written: raise " \
           "--max-new-tokens" in capsys.readouterr().err


def test_whole_samples_are_written_beside_cut_ones(fake, tmp_path, capsys):
    fake("stop", "length")
    out = tmp_path / "solution.py"
    assert main(["generate", str(PROBLEM), "--out", str(out), "--samples", "2", "--top-k", "0"]) == 0
    assert out.read_text() == KERNEL and not (tmp_path / "solution_2.py").exists()
    err = capsys.readouterr().err
    assert f"wrote {out}" in err and "sample 2: cut off" in err


def test_several_greedy_samples_are_refused_before_loading(fake, capsys):
    made = fake("stop", "stop")
    assert main(["generate", str(PROBLEM), "--samples", "2"]) == 2
    assert "would write 2 identical kernels; sample instead with --top-k 0" in capsys.readouterr().err
    assert not made.loaded
    assert main(["generate", str(PROBLEM), "--samples", "2", "--top-k", "0", "--temperature", "0"]) == 2
    assert main(["generate", str(PROBLEM), "--samples", "2", "--top-k", "0"]) == 0 and made.loaded


def test_a_file_without_model_is_refused_before_loading(fake, tmp_path, capsys):
    made = fake("stop")
    solution = tmp_path / "only_new.py"
    solution.write_text(KERNEL)
    assert main(["generate", str(solution)]) == 2
    assert "defines no `class Model`" in capsys.readouterr().err and not made.loaded
    # --infill needs a CUDA source to fill in, and a problem
    skeleton = tmp_path / "skeleton.py"
    skeleton.write_text(f"# dice: reference = {PROBLEM}\n" + KERNEL)
    assert main(["generate", str(skeleton), "--infill"]) == 2
    assert "has no CUDA source string to fill in" in capsys.readouterr().err and not made.loaded


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(fake, capsys):
    fake("stop", fail=RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert main(["generate", str(PROBLEM)]) == 2
    err = capsys.readouterr().err
    assert err == ("dice-lsp generate: unexpected error: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB "
                   "(run again with --debug for the traceback)\n")
    assert main(["generate", str(PROBLEM), "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.endswith("2.00 GiB\n")


def test_progress_on_request_goes_to_stderr_and_code_to_stdout(fake, capsys):
    fake("stop")
    assert main(["generate", str(PROBLEM), "--progress"]) == 0
    captured = capsys.readouterr()
    assert captured.out == KERNEL
    lines = captured.err.splitlines()
    assert lines[:3] == ["loading torch and the model", "loading bundled", "decoding 1 sample on cpu"]
    assert main(["generate", str(PROBLEM)]) == 0
    assert capsys.readouterr().err == ""  # not a terminal: no progress unless asked


def test_generated_code_is_exact_in_a_pipe_and_escaped_on_a_terminal(fake, capsys, monkeypatch):
    fake("stop", code="x = '\x1b[2J'\n")
    assert main(["generate", str(PROBLEM)]) == 0
    assert capsys.readouterr().out == "x = '\x1b[2J'\n"  # `> solution.py` gets the model's bytes
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(["generate", str(PROBLEM)]) == 0
    assert capsys.readouterr().out == "x = '\\x1b[2J'\n"


def test_tiny_model_cut_off_end_to_end(tiny_model_dir, tmp_path):
    out = tmp_path / "solution.py"
    done = subprocess.run([sys.executable, "-m", "dice_lsp", "generate", str(PROBLEM), "--model", str(tiny_model_dir),
                           "--device", "cpu", "--max-new-tokens", "8", "--out", str(out), "--progress"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "cut off at --max-new-tokens 8" in done.stderr and not out.exists()
    assert "loading torch and the model" in done.stderr and "decoding 1 sample on cpu" in done.stderr
    assert "Traceback" not in done.stderr
