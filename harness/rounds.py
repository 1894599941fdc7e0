"""The time stage seen from the caller: rounds with the forwards agreed in advance, every solution round held against
the caller's own clock, the sides pooled, and afterwards a few timed calls' outputs compared with the reference's.

The solution's worker runs the candidate, so nothing it reports is taken on trust: its readings must fit the caller's
clock (`samples.outside_clock`), its kept outputs are checked by the reference worker, and any of that failing is an
error finding and no speedup (`findings.TIMING_ERRORS`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from dice_lsp.harness import findings, handover, samples
from dice_lsp.harness.errors import HarnessError
from dice_lsp.harness.messages import CompareTimed, Failed, HandTimed, Time, TimedCall
from dice_lsp.harness.report import Report, Timing


def cpu_threads(options: Any) -> int:
    """The intra-op threads both sides are timed with on a CPU (the same for both). With every core busy, an
    operator split over all of them waits for its slowest thread: one eager op on the 2-core machine took
    0.06-0.13 ms in one run and 20-44 ms in another while another job ran. With one thread (the default) the
    samples are CPU time (`timing.cpu_seconds`), which another job on the cores does not stretch."""
    return max(1, options.timing_threads)


def time_sides(check: Any, reference: Any, solution: Any) -> Report | None:
    """Time every side; None when the solution was timed, a report when it crashed while timed.

    The sides take turns over `timing_rounds` rounds, in alternating order, and each side's rounds are pooled (each
    weighing the same): on the H200 the eager and solution medians of one microsecond kernel, timed one after the
    other, gave speedups from 0.53x to 1.99x over five re-checks, the GPU clock ramping between the two. Each round's
    count of timed forwards is fixed here before it runs (`samples.round_trials`)."""
    options = check.options
    started = time.perf_counter()
    cpu = check.fields.get("device") == "cpu"
    sides = [("eager", reference, False)] if options.baseline in ("eager", "both") else []
    sides.append(("solution", solution, False))
    if options.baseline in ("compile", "both"):
        sides.append(("compile", reference, True))
    rounds = max(1, options.timing_rounds)
    parts: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in sides}
    failed: set[str] = set()
    clock: list[str] = []
    seen: dict[str, list[str]] = {"lazy": [], "threads": [], "tampered": []}
    check.timed_calls = []
    estimate_ms = _forward_estimate_ms(check)
    with check.pool.quiet():  # no spare warms up beside a timed forward
        for turn in range(rounds):
            # Later rounds follow other sides' forwards on a GPU at full clock: one forward, or a quarter of the
            # first round's warm-up time, brings the side back (at 5 ms a forward, each extra warm-up forward
            # costs a quarter of a percent of a 2 s re-check)
            # On the CPU a first round warms every placement of the inputs twice (`timing.measure`); the warm-up
            # forwards agreed are what the CPU the kernel counts may spend beyond the timed calls
            warmup = (max(options.warmup_trials, 2 * samples.PLACEMENTS) if cpu else options.warmup_trials) \
                if turn == 0 else 1
            warm_s = options.warmup_s if turn == 0 else options.warmup_s / 4
            for name, worker, compiled in sides if turn % 2 == 0 else sides[::-1]:
                if name in failed:
                    continue
                so_far = [m for part in parts[name] for m in [samples.summary(part["samples"])["median_ms"]]]
                trials = samples.round_trials(options.timing_trials, rounds, options.timing_budget_s,
                                              min(so_far) if so_far else None, options.timing_cap_s, estimate_ms)
                ours = name == "solution"
                # On the CPU, eager's side also watches and keeps (and drops what it kept): the CPU the kernel counts
                # outside the timed calls (`samples.hidden_cpu`) then compares like with like. Under a memory-heavy
                # job beside, the solution's copies of kept outputs alone took 134-176 ms over a check's rounds
                mirror = cpu and not ours
                command = Time(compiled=compiled, trials=trials, warmup=warmup, warm_s=warm_s, round=turn,
                               check=check.token, fresh=ours or cpu, watch=ours or mirror,
                               keep=options.timed_checks if ours or mirror else 0, mirror=mirror,
                               threads=cpu_threads(options) if cpu else 0)
                cpu_before = samples.tree_cpu_ms(worker.pid) if cpu else 0.0
                sent = time.perf_counter()
                answer = check.call(worker, command, "time", options.run_timeout)
                received = time.perf_counter()
                if isinstance(answer, Failed):
                    if ours:
                        check.findings.append(findings.Finding(
                            "crash", f"forward raised {answer.error} while timed", check.forward_span(), "error"))
                        check.stage("time", started, "failed", answer.error)
                        return check.report("crashed", answer.error, log=answer.traceback)
                    check.stage("time", started, "failed", f"{name}: {answer.error}")
                    failed.add(name)
                    continue
                part = dataclasses.asdict(answer.timing)
                if cpu:  # the kernel's account of the worker's CPU over the command, and the warm-up agreed
                    part.update(outside_cpu_ms=samples.tree_cpu_ms(worker.pid) - cpu_before, warmup=warmup)
                parts[name].append(part)
                if ours:
                    clock += samples.outside_clock(part, trials, sent, received)
                    check.timed_calls += list(answer.kept)
                    if options.timed_checks and not answer.kept and not answer.lazy:
                        clock.append(f"round {turn} kept no timed call's outputs to check")
                    for key in seen:
                        seen[key] += [answer.lazy] if key == "lazy" else list(getattr(answer, key))
    _findings(check, parts, clock, seen)
    raw = {name: samples.pool(part, options.timing_trials) for name, part in parts.items()
           if part and name not in failed}
    _speedups(check, raw)
    if not any(s.name == "time" for s in check.stages):
        check.stage("time", started, detail=capped(check.fields.get("timings", {}), options))
    return None


def _forward_estimate_ms(check: Any) -> float | None:
    """An upper bound on one forward's time before any round ran: the verify stage's seconds (the solution's
    trials, one forward each plus making their inputs, and the comparison) per forward it ran."""
    verify = next((s for s in check.stages if s.name == "verify"), None)
    if verify is None or verify.seconds <= 0:
        return None
    return verify.seconds * 1e3 / (check.options.correctness_trials + 1)


def capped(timings: dict[str, Any], options: Any) -> str:
    """The time stage's note when the time cap cut a side's trials below `timing_trials`."""
    short = {name: t.trials for name, t in timings.items() if t.trials < options.timing_trials}
    if not short:
        return ""
    counts = ", ".join(f"{name} {count}" for name, count in short.items())
    return (f"long forwards: timed forwards capped near {options.timing_cap_s:g} s a side ({counts}, "
            f"not {options.timing_trials})")


def _findings(check: Any, parts: dict[str, list[dict[str, Any]]], clock: list[str],
              seen: dict[str, list[str]]) -> None:
    span = check.forward_span()
    for hidden in (samples.hidden_time(parts.get("solution", []), parts.get("eager", [])),
                   samples.hidden_cpu(parts.get("solution", []), parts.get("eager", []))):
        if hidden:
            clock.append(hidden)
    if clock:
        check.findings.append(findings.outside_clock(clock, span))
    tampered = list(dict.fromkeys(seen["tampered"]))
    if tampered and not any(f.code == "timer-patch" and "changed the harness" in f.message for f in check.findings):
        check.findings.append(findings.tampered(tampered, span))
    lazy = next((why for why in seen["lazy"] if why), "")
    if lazy and not any(f.code == findings.LAZY_OUTPUT for f in check.findings):
        check.findings.append(findings.lazy(lazy, span))
    threads = list(dict.fromkeys(seen["threads"]))
    if threads:
        check.findings.append(findings.threads(threads, span))


def _speedups(check: Any, raw: dict[str, dict[str, Any]]) -> None:
    options = check.options
    span = check.forward_span()
    for name, pooled in raw.items():
        pooled["disagrees"] = samples.timer_disagrees(pooled, options.timer_tolerance)
        if pooled["disagree"]:
            check.findings.append(findings.unstable_rounds(name, pooled["round_medians_ms"], span))
    check.fields["timings"] = {k: Timing(**{f: v[f] for f in Timing.__dataclass_fields__ if f in v})
                               for k, v in raw.items()}
    escaped = any(v.get("disagrees") for v in raw.values())
    if raw.get("solution", {}).get("disagrees"):
        check.findings.append(findings.timer_mismatch(raw["solution"], span))
    if faked(check):
        return
    clock = "host_median_ms" if escaped else "median_ms"
    solution_ms = raw["solution"][clock] if "solution" in raw else None
    for name, field_name in (("eager", "speedup_eager"), ("compile", "speedup_compile")):
        if name in raw and solution_ms:
            check.fields[field_name] = raw[name][clock] / solution_ms


def faked(check: Any) -> bool:
    """An error finding that says the timing cannot be trusted: no speedup is given."""
    return any(f.code in findings.TIMING_ERRORS and f.severity == "error" for f in check.findings)


def check_timed_calls(check: Any, reference: Any, solution: Any, exchange: str) -> findings.Finding | None:
    """Compare the outputs the solution's worker kept from its timed calls (chosen after they ran) with the
    reference's on the same inputs; the finding when any differs. Sends the two commands only: the caller receives
    the reference's answer (`finish_timed_calls`), so the solution's inspection can run meanwhile."""
    calls: list[TimedCall] = getattr(check, "timed_calls", [])
    if not calls:
        return None
    options = check.options
    # Into the solution's own writable folder (its sandbox can write nowhere else), then over to the reference's
    handed = check.call(solution, HandTimed(exchange=solution.inner_scratch, share=check.share_timed), "time",
                        options.run_timeout)
    if isinstance(handed, Failed):
        raise HarnessError(f"handing over the timed calls' outputs failed: {handed.error}", "died", handed.traceback)
    handover.take_outputs(solution, exchange, options)
    handover.hand_shared(solution, reference)
    if list(handed.calls) != calls:
        return findings.outside_clock(["it handed over other timed calls than the ones it said it kept"],
                                      check.forward_span())
    reference.send(CompareTimed(exchange=exchange, calls=tuple(calls)))
    check.awaiting_timed = tuple(calls)
    return None


def finish_timed_calls(check: Any, reference: Any) -> list[findings.Finding]:
    """The reference's comparison of the timed calls sent by `check_timed_calls` (nothing when none was sent)."""
    calls = getattr(check, "awaiting_timed", ())
    if not calls:
        return []
    check.awaiting_timed = ()
    compared = check.receive(reference, "time", check.options.run_timeout)
    if isinstance(compared, Failed):
        reference.kill()  # its state is unknown now: never kept for another check
        raise HarnessError(f"comparing the timed calls failed: {compared.error}", "died", compared.traceback)
    timing = check.fields.get("timings", {}).get("solution")
    if timing is not None:
        check.fields["timings"]["solution"] = dataclasses.replace(timing, checked=len(compared.trials))
    return findings.timed_calls(compared.trials, calls, check.forward_span())
