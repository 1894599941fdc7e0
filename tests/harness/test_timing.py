"""The timing loop's trial count: the minimum always, more for a short forward until the time budget is spent."""

import os
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest
import torch

from dice_lsp import harness
from dice_lsp.harness import Options, WorkerPool, messages, process, samples, timing
from dice_lsp.harness.samples import TimedRound


def test_a_round_times_exactly_the_forwards_agreed_and_reports_its_readings():
    calls = []
    result = timing.measure(lambda: (calls.append(1), time.sleep(0.002)), torch.device("cpu"), trials=7, warmup=1)
    assert len(result.samples) == 7 and len(calls) == 8 and result.clock == "host"  # one warm-up, seven timed
    assert 2.0 <= result.median_ms
    starts = result.starts
    assert len(starts) == 7 and result.loop_start <= starts[0] and starts == tuple(sorted(starts))
    assert starts[-1] + result.samples[-1] / 1e3 <= result.loop_end


def test_a_short_forward_gets_more_trials_in_later_rounds_up_to_ten_times_its_share():
    assert samples.round_trials(100, 4, 0.1, None) == 25  # the first round: its share alone
    assert samples.round_trials(100, 4, 0.1, 0.005) == 250  # 25 ms of budget at 5 us: capped at ten times
    assert samples.round_trials(100, 4, 0.1, 0.5) == 50  # 25 ms at 0.5 ms a forward
    assert samples.round_trials(100, 4, 0.1, 5.0) == 25  # never below the share
    assert samples.round_trials(7, 3, 0.0, 0.001) == 3


def test_a_long_forward_gets_fewer_trials_under_the_time_cap():
    """The time cap (issue 25): 20 s a side over 4 rounds is 5 s a round; at 1 s a forward, 5 trials a round, never
    fewer than MIN_ROUND_TRIALS; the first round goes by the verify stage's estimate; short forwards are untouched."""
    assert samples.round_trials(100, 4, 0.1, 1000.0, cap_s=20.0) == 5
    assert samples.round_trials(100, 4, 0.1, None, cap_s=20.0, estimate_ms=1000.0) == 5  # first round, estimated
    assert samples.round_trials(100, 4, 0.1, 10_000.0, cap_s=20.0) == samples.MIN_ROUND_TRIALS
    assert samples.round_trials(100, 4, 0.1, 0.5, cap_s=20.0) == 50  # short: the budget's extra trials stay
    assert samples.round_trials(100, 4, 0.1, None, cap_s=20.0, estimate_ms=40.0) == 25  # no cap at 40 ms
    assert samples.round_trials(100, 4, 0.1, 1000.0, cap_s=0.0) == 25  # no cap set: KernelBench's share


def test_a_check_of_a_long_forward_times_fewer_trials_and_says_so(files, options):
    """A forward that keeps the CPU busy for tens of milliseconds, checked with a 1 s cap: the time stage says how
    many forwards each side got, and the report's timings hold those counts (CPU time is what a CPU check times,
    so the forward must work, not sleep)."""
    busy = "sum(range(2_000_000))"
    reference = files.text("add_reference.py").replace("return a + b", f"{busy}\n        return a + b")
    solution = files.solution(f"{busy}\n        return self.ext.add_values(a, b)")
    report = harness.check(reference, solution, options.with_(timing_trials=100, timing_cap_s=1.0))
    assert report.status == "correct", report.summary() + report.log
    detail = next(s.detail for s in report.stages if s.name == "time")
    assert detail.startswith("long forwards: timed forwards capped near 1 s a side"), detail
    assert all(t.trials < 100 for t in report.timings.values()), report.timings


@pytest.mark.gpu
def test_a_slow_gpu_forward_is_not_queued_past_the_warm_up_time():
    """Warm-up lasts `warm_s` of GPU time, not of the host's queueing: a 5 ms forward gets a few warm-ups, not the
    hundreds the host can queue in 10 ms."""
    device = torch.device("cuda")
    calls = []
    timing.measure(lambda: (calls.append(1), torch.cuda._sleep(1_000_000)), device, trials=3, warmup=2)  # clock
    probe_start, probe_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe_start.record()
    torch.cuda._sleep(1_000_000)
    probe_end.record()
    torch.cuda.synchronize()
    cycles = int(1_000_000 * 5.0 / probe_start.elapsed_time(probe_end))  # ~5 ms of GPU sleep
    calls.clear()
    result = timing.measure(lambda: (calls.append(1), torch.cuda._sleep(cycles)), device, trials=3, warmup=2,
                            warm_s=0.01)
    assert len(result.samples) == 3 and 4.0 < result.median_ms < 7.0  # GPU time (events), which no host job stretches
    assert len(calls) - 3 <= 4  # the warm-ups counted, not the host's time: a few, not hundreds
    calls.clear()  # ten warm-ups asked for: no more than ~10 ms of them are queued (and two at least)
    timing.measure(lambda: (calls.append(1), torch.cuda._sleep(cycles)), device, trials=3, warmup=10, warm_s=0.01)
    assert len(calls) - 3 <= 3


@pytest.mark.gpu
def test_small_timed_inputs_get_copies_at_other_addresses_and_large_ones_none():
    device = torch.device("cuda")
    small = [torch.randn(512, 512, device=device), 3, torch.randn(512, device=device)]
    copies = timing.placements(small, device)
    assert len(copies) == timing.PLACEMENTS and copies[0] is small
    assert len({c[0].data_ptr() for c in copies}) == timing.PLACEMENTS
    assert all(torch.equal(c[0], small[0]) and c[1] == 3 and torch.equal(c[2], small[2]) for c in copies)
    large = [torch.empty(timing.PLACEMENT_BYTES // 4 + 1, device=device)]
    assert timing.placements(large, device) == [large]


def test_several_forwards_are_taken_in_turn_and_their_last_outputs_held_back():
    """One forward per placement of the inputs, in turn; the outputs of the last two trials stay alive while the
    third runs (so a GPU allocator puts each output somewhere else), and nothing stays alive after. On the CPU, a
    warm-up of as many forwards as agreed runs every placement twice, however short the forward."""
    alive, calls, seen = [], [], []

    def forward(index: int):
        def run():
            calls.append(index)
            seen.append(sum(ref() is not None for ref in alive))
            out = torch.zeros(4)
            alive.append(weakref.ref(out))
            return out
        return run

    result = timing.measure([forward(0), forward(1), forward(2)], torch.device("cpu"), trials=6, warmup=1)
    assert result.placements == 3 and len(result.samples) == 6
    assert calls == [0, 1, 2, 0, 1, 2, 0]  # one warm-up, then the trials, round robin
    assert max(seen) == 2 and seen[-1] == 2
    assert not any(ref() is not None for ref in alive)
    assert timing.placements([torch.zeros(3)], torch.device("cpu"))[0][0].shape == (3,)  # CPU: the inputs alone

    def slow(index: int):  # 4 ms or more: ten warm-ups would be past the warm-up's 10 ms, which stops at two
        return lambda: (calls.append(index), time.sleep(0.004))

    calls.clear()
    timing.measure([slow(0), slow(1), slow(2)], torch.device("cpu"), trials=3, warmup=10)
    assert calls == [0, 1, 2] * 3  # ten agreed: six run, every placement twice
    calls.clear()
    timing.measure([slow(0), slow(1), slow(2)], torch.device("cpu"), trials=3, warmup=1)
    assert calls == [0, 1, 2, 0]  # one agreed, one run


def _host(values: list[float]) -> TimedRound:
    return TimedRound(samples=tuple(values), host_samples=tuple(values), clock="host")


def test_rounds_pool_into_one_median_over_every_sample():
    first = _host([1.0, 1.01, 0.99])
    late = first.samples[0] * 1.2  # a later round a little slower: drift, pooled (far slower ones are not)
    pooled = samples.pool([first, _host([late] * 3)])
    assert pooled.trials == 6 and pooled.rounds == 2 and pooled.max_ms == late
    assert 1.0 < pooled.median_ms < late  # the middle of both rounds, not of either


def test_each_round_weighs_the_same_whatever_its_sample_count():
    """A round with ten times the samples (a short forward in a quiet moment) does not decide the median alone."""
    quick = _host([1.0] * 1000)
    slow = [_host([v] * 10) for v in (1.1, 1.2)]
    pooled = samples.pool([quick, *slow])
    assert pooled.median_ms == 1.1 and pooled.trials == 1020  # by sample count it would be 1.0
    assert not pooled.unsteady
    apart = samples.pool([quick, _host([1.6] * 10)])
    assert apart.unsteady and apart.rounds_left_out == 0  # kept (a fast round is never left out), but warned


def test_rounds_of_a_few_microseconds_apart_by_less_than_the_floor_are_steady():
    """A 4 us kernel whose rounds differ by 1.5 us (37 %) agree: that is the GPU clock's and the events' own play;
    by 3 us they do not."""
    near = samples.pool([_host([0.0055] * 20), _host([0.0055] * 20), _host([0.004] * 20)])
    assert not near.unsteady and near.rounds_left_out == 0
    far = samples.pool([_host([0.0071] * 20), _host([0.0071] * 20), _host([0.004] * 20)])
    assert far.unsteady and far.rounds_left_out == 0


def _round(values: list[float]) -> TimedRound:
    return TimedRound(samples=tuple(values), host_samples=tuple(v + 0.01 for v in values), clock="cuda-events",
                      overhead_ms=0.01)


def test_a_far_slower_round_is_left_out_while_the_rest_hold_the_minimum_trials():
    steady = [_round([0.0048, 0.0049, 0.0048, 0.0050] * 50) for _ in range(3)]
    slow = _round([0.0180, 0.0170, 0.0190, 0.0049] * 50)
    pooled = samples.pool([slow, *steady], minimum=100)
    assert pooled.rounds_left_out == 1 and pooled.trials == 600 and pooled.median_ms < 0.0050
    assert len(pooled.round_medians_ms) == 4 and pooled.round_medians_ms[0] > 0.017  # still reported
    assert pooled.slow_fraction > 0.15  # over every sample: the slow round shows there
    kept_all = samples.pool([slow, *steady], minimum=800)  # leaving it out would go under the minimum
    assert kept_all.rounds_left_out == 0 and kept_all.trials == 800
    drift = samples.pool([_round([0.0055] * 50), *steady], minimum=100)  # 12 % slower: drift, not an outlier
    assert drift.rounds_left_out == 0
    fast = samples.pool([_round([0.001] * 50), *steady], minimum=100)  # a fast round is never left out
    assert fast.rounds_left_out == 0


def test_a_wall_time_far_above_the_cpu_time_is_told_apart_from_a_busy_machine():
    def cpu(wall_ms: float) -> samples.Pooled:
        return samples.pool([TimedRound(samples=(2.0,) * 10, host_samples=(wall_ms,) * 10, clock="cpu-time")])

    assert not samples.wall_exceeds_cpu(cpu(4.4))  # another job on the cores: 2.2 times as long
    assert samples.wall_exceeds_cpu(cpu(8.5))  # waited for something its CPU clock does not see
    assert not samples.wall_exceeds_cpu(samples.pool([_round([0.005] * 10)]))  # events: not a CPU clock


def test_two_checks_worth_of_spares_where_the_cores_allow(monkeypatch):
    pool = WorkerPool()
    for cores, spares in ((2, 2), (16, 4)):
        monkeypatch.setattr(process.os, "cpu_count", lambda: cores)
        pool.keep_warm()
        assert pool.spare_count == spares


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]  # R, S, T (stopped), ...


def _status(pid: int) -> str:
    """State, parent and signal masks of `pid`, for a failure message."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as error:
        return str(error)
    return ", ".join(line for line in lines if line.split(":")[0] in ("State", "PPid", "SigPnd", "ShdPnd", "SigBlk"))


def _stops(pid: int) -> bool:
    """Whether `pid` is stopped, waiting until it is: a process takes SIGSTOP when it next runs, which on a loaded
    machine (or in the middle of its exec) may be a while after the signal was sent. One never stopped fails the
    test at pytest's timeout."""
    while _state(pid) != "T":
        time.sleep(0.02)
    return True


def test_spares_are_stopped_while_a_timed_region_runs_and_continue_after(unknown_command):
    options = Options(device="cpu")
    pool = WorkerPool()
    pool.keep_warm(2)
    try:
        pool.fill(options)  # one spare of each role (reference, solution)
        spares = pool.spares(options)
        assert sorted(w.role for w in spares) == ["reference", "solution"]
        [spare] = [w for w in spares if w.role == "solution"]
        with pool.quiet():
            with pool.quiet():  # nested regions (several GPUs timing at once) keep them stopped until the last ends
                pass
            assert all(_stops(w.pid) for w in spares)
            taken = pool.start(options)  # a spare taken while stopped runs again; its replacement starts stopped
            added = [w for w in pool.spares(options) if w not in spares]
            assert taken is spare and _state(taken.pid) != "T"
            assert all(_stops(w.pid) for w in added)
        assert all(_state(w.pid) != "T" for w in added)
        answer = taken.call(unknown_command, 60)  # it answers commands
        assert isinstance(answer, messages.Failed) and answer.error.startswith("MessageError: unknown command")
        taken.close()
    finally:
        pool.close()


def test_spares_stopped_when_their_caller_dies_are_continued_and_end(tmp_path):
    """The caller is killed inside a timed region: its guard continues the stopped spares, which see their stdin
    close and exit, so no stopped worker is left holding memory."""
    script = (
        "import os, signal, time\n"
        "from dice_lsp.harness import Options, WorkerPool\n"
        "pool = WorkerPool(); pool.keep_warm(2)\n"
        "options = Options(device='cpu')\n"
        "pool.fill(options)\n"
        "spares = pool.spares(options)\n"
        "def state(pid):  # 'gone' for a spare that ended: what the hang guard below reports, not a traceback\n"
        "    try:\n"
        "        return open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[0]\n"
        "    except OSError:\n"
        "        return 'gone'\n"
        "with pool.quiet():\n"
        "    hang = time.monotonic() + 300  # a hang guard that says what it saw, not a bound on speed\n"
        "    for w in spares:  # killed only once both are stopped, so the guard has something to continue\n"
        "        while state(w.pid) != 'T':\n"
        "            if time.monotonic() > hang:\n"
        "                print('never stopped:', [(s.role, s.pid, s.process.pid, s.process.poll(), state(s.pid))\n"
        "                                        for s in spares], open(w.log_path).read()[-2000:], flush=True)\n"
        "                os._exit(3)\n"
        "            time.sleep(0.02)\n"
        "    print(' '.join(str(w.pid) for w in spares), flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n")
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root,
                          env={**os.environ, "PYTHONPATH": root})
    assert done.returncode == -9, (done.returncode, done.stdout, done.stderr)
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2, done.stdout

    def alive(pid: int) -> bool:
        try:
            return _state(pid) not in ("Z", "X")
        except FileNotFoundError:
            return False

    try:  # they end (waited for, not timed); spares left stopped never do. The guard below turns such a hang into
        # a failure that names each one's state and parent, before pytest's timeout would end the run unexplained
        hang = time.monotonic() + 300
        while any(alive(pid) for pid in pids):
            if time.monotonic() > hang:
                pytest.fail("spares still alive after their caller died: " + "; ".join(
                    f"{pid}: {_status(pid)}" for pid in pids if alive(pid)))
            time.sleep(0.1)
    finally:
        for pid in pids:  # leave nothing behind, whatever the outcome
            if alive(pid):
                os.kill(pid, 9)
