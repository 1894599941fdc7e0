#!/usr/bin/env bash
# The GPU tests from a bare GPU machine: the whole `pytest -m gpu` in two device calls of 10 minutes, a smoke set in
# one short call, or the decode and build benchmarks; every failure's reason written the moment it happens, and each
# run's record appended to $OUT/RESULTS.md.
#
# Use, through the device tool from the repo root (the wheels the machine lacks travel in .whl/, which
# `bash benchmarks/gpu_wheels.sh` fills here):
#     run(command="COMMIT=<sha> bash benchmarks/gpu_session.sh call1", carry=[".whl"], timeout_s=600)
#     run(command="COMMIT=<sha> bash benchmarks/gpu_session.sh call2", carry=[".whl"], timeout_s=600)
#     run(command="COMMIT=<sha> bash benchmarks/gpu_session.sh smoke", carry=[".whl"], timeout_s=240)
#     run(command="COMMIT=<sha> bash benchmarks/gpu_session.sh probe", carry=[".whl"], timeout_s=420)
# (probe first while CUDA IPC between nobody's sandboxes has not yet been seen to work: see
# benchmarks/gpu_sandbox_probe.py; CUDA itself starts in the sandbox since 83b34de. Test paths after `probe` run after
# the defences' tests, in the same pytest.)
# then append $OUT/RESULTS.md (this run's sections only) to benchmarks/RESULTS.md here, and give the machine back.
#
# SET, the first argument:
#   call1  the bundled model's kernels, one instance of every task template, the engine's attention kernels
#   call2  the harness on the GPU (real sizes, attacks, timing, verify), the server's save, training's attention,
#          the engine's CUDA graphs; any GPU test file in neither list runs here too
#   smoke  one test for each GPU claim of the README (under 3 minutes, set-up included; the list is below)
#   defences  the sandbox's and the watched time stage's GPU tests (issues 34 and 36; the list is below)
#   all    call1 and call2 in one pytest, for a call longer than 10 minutes
#   bench  the decode and build benchmarks (benchmarks/decode.py, build.py)
#   probe  CUDA's start and its IPC in the worker's sandbox, as root and as nobody (benchmarks/gpu_sandbox_probe.py,
#          about a minute), then the defences set below
#   PATH   test files or node ids, as one set
# Further arguments go to pytest (`-k EXPR`, `-x`, ...).
#
# Environment: BUDGET (the script's seconds: it must end inside the call; default 575, smoke 175), TEST_TIMEOUT (one
# test's most through pytest-timeout: that test fails with every thread's stack and the run goes on; default 400,
# far above the longest, the bundled model's 13 drafts and checks (about 250 s estimated); smoke 150), HANG_DUMP (faulthandler_timeout: every thread's stack once a test has run this long; default 90),
# SETUP (auto: install .whl/ where it is and dice-lsp where it is not importable; skip: nothing, as on the CPU machine,
# whose Python is not the wheels' 3.12), COMMIT (the commit the tree is at, for the record; the machine's copy may
# have no .git), OUT (default /tmp/dice-gpu), and for bench: DECODE_LIMIT, BUILD_LIMIT, PROFILE=1, STEPS=1,
# SKIP_PLAIN=1. A dry run on the CPU machine (the GPU tests skip; every log is written):
#     OUT=/tmp/gpu-dry SETUP=skip bash benchmarks/gpu_session.sh call1
#
# What comes back in $OUT (the device returns at most 8 files): session.log (set-up, machine, how each stage ended),
# tests.log (pytest -v, hang dumps, the slowest tests), failures.log (every failure's reason, written as it happens),
# outcomes.jsonl (each test's start and end, so a cut run still tells seconds per file), RESULTS.md (this run's
# sections); bench adds decode.log and build.log.
#
# Where the time went on the H100 of 2026-12-07 (shared/gpu-runs/README.md), one pytest per file: the task templates'
# and the bundled model's files were killed while building their kernels, and each file built the precompiled torch
# header and its fixtures again. Now each call is one pytest: every build the selected tests declare
# (`@pytest.mark.prebuild`, tests/conftest.py) runs at once on all cores from the session's start, beside the tests
# that time nothing (the bundled model's decoding, the engine's kernels), and the tests that time wait for them.
set -uo pipefail
out="${OUT:-/tmp/dice-gpu}"
mkdir -p "$out"
started=$SECONDS
set_name="${1:-call1}"
shift $(( $# > 0 ? 1 : 0 ))
[ "$set_name" = smoke ] && default_budget=175 || default_budget=575
budget="${BUDGET:-$default_budget}"
export PYTHONUNBUFFERED=1 CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
log() { echo "[$((SECONDS - started)) s] $*" | tee -a "$out/session.log"; }

# The bundled model's decoding first: its 13 drafts and every template's solution build beside it (57 builds, about
# 23 CPU-s each); then the templates' 44 checks and the engine's kernels
call1=(tests/engine/test_bundled.py tests/train/test_tasks.py tests/engine/test_attention.py
       tests/engine/test_fused.py)
# Tests that time nothing first (beside the builds); the root caller's GPU check last, which ran past its file's
# limit on the H100 and so can cut nothing after it
call2=(tests/engine/test_fast.py tests/train/test_gpu.py tests/harness/test_big_problems.py
       tests/harness/test_verify.py tests/harness/test_timing.py tests/harness/test_attacks.py tests/server/test_gpu.py)
call2_last=tests/harness/test_gpu.py
# One test for each GPU claim of the README, the bundled model's decoding first (beside the builds). Left out for
# time: the re-check of a kept reference (tests/harness/test_gpu.py, four checks), which the server's save and the
# harness test here exercise in part (inputs made on the GPU, outputs by CUDA IPC)
smoke=(
    # the bundled model's kernels pass the harness on a GPU ("Default model")
    tests/engine/test_bundled.py::test_the_bundled_models_kernel_for_a_held_out_activation_is_correct_on_a_gpu
    # one instance of every training template is correct on a GPU: one family's three, inputs of kilobytes
    # ("Development")
    "tests/train/test_tasks.py::test_one_instance_of_every_template_is_correct_on_a_gpu[unary]"
    # problems of 6-9 GB checked like small ones ("Checks at real sizes")
    "tests/harness/test_big_problems.py::test_real_size_problem_is_checked_correct[row_rms]"
    # build, verify, time and inspect on the local GPU, outputs by CUDA IPC between sandboxes (`dice-lsp check`,
    # "Isolation"); its torch.compile of the reference is kept for the server's check below
    tests/harness/test_gpu.py::test_cuda_kernel_is_verified_timed_and_profiled
    # on save, speedups on class ModelNew and each kernel's share on its line ("In the editor")
    tests/server/test_gpu.py::test_saved_cuda_solution_shows_speedups_and_kernel_shares
)

# The defences of issues 34 and 36 on a GPU, never yet run there (one short call): CUDA in the sandbox as nobody
# with the process count, the watched time stage's bookkeeping attacks (outputs staged in a GPU buffer the
# reference worker opens by CUDA IPC), the GPU attack tests, and one honest check end to end
defences=(tests/harness/test_sandbox_gpu.py tests/harness/test_bookkeeping.py tests/harness/test_attacks.py
          tests/harness/test_gpu.py::test_cuda_kernel_is_verified_timed_and_profiled
          tests/harness/test_gpu.py::test_a_root_callers_gpu_check_runs_its_candidate_unprivileged)

gpu_files() { grep -rl "mark.gpu" tests --include="test_*.py" | sort; }
others() {  # GPU test files in neither call's list
    gpu_files | grep -vxF -f <(printf '%s\n' "${call1[@]}" "${call2[@]}" "$call2_last")
}

case "$set_name" in
    call1) tests=("${call1[@]}") ;;
    call2) mapfile -t extra < <(others); tests=("${call2[@]}" "${extra[@]}" "$call2_last") ;;
    smoke) tests=("${smoke[@]}") ;;
    defences) tests=("${defences[@]}") ;;
    all) mapfile -t extra < <(others); tests=("${call1[@]}" "${call2[@]}" "${extra[@]}" "$call2_last") ;;
    bench) tests=() ;;
    probe) tests=("${defences[@]}") ;;
    *) tests=("$set_name") ;;
esac

setup() {
    if [ "${SETUP:-auto}" = skip ]; then
        log "setup: skipped (SETUP=skip)"
    else
        if ls .whl/*.whl > /dev/null 2>&1; then
            log "setup: the wheels of .whl/ into /tmp/site"
            python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
                .whl/*.whl >> "$out/session.log" 2>&1 || { log "setup: installing the wheels failed"; return 2; }
            export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
        else
            log "setup: no .whl/ here (make it with benchmarks/gpu_wheels.sh and pass carry=[\".whl\"]); using what is installed"
        fi
        # Asked from / (in the tree's root the tree itself is on the path): harness/ imports as dice_lsp.harness
        # only once this tree is installed
        local tree="$PWD/"
        if (cd / && python3 -c "import dice_lsp.harness as h, sys; sys.exit(not h.__file__.startswith('$tree'))") \
            2> /dev/null; then
            log "setup: dice-lsp already imports from this tree"
        else
            log "setup: dice-lsp from this tree (editable, no dependencies, no index)"
            python3 -m pip install -q --no-deps --no-build-isolation --no-index --break-system-packages -e . \
                >> "$out/session.log" 2>&1 || { log "setup: installing dice-lsp failed"; return 2; }
        fi
    fi
    # Everything a GPU test imports, named here, so a missing wheel is one line in session.log, not 40 failed tests
    python3 - >> "$out/session.log" 2>&1 <<'EOF' || { log "setup: an import failed (session.log)"; return 2; }
import sys
import lsprotocol, pygls, pytest_asyncio, pytest_lsp, pytest_timeout, tree_sitter, tree_sitter_cuda  # noqa: F401
import tree_sitter_python  # noqa: F401
import torch
import dice_lsp.server, dice_lsp.harness, dice_lsp.engine  # noqa: F401
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpus", torch.cuda.device_count(), "dice_lsp from", dice_lsp.__file__)
EOF
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$out/session.log" 2>&1 ||
        log "nvidia-smi failed: no GPU driver here? (the GPU tests skip)"
}

card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1)
card="${card:-no GPU}"
commit="${COMMIT:-$(git rev-parse --short HEAD 2> /dev/null || echo unknown)}"
log "set $set_name on $card ($(nproc) cores), commit $commit, budget $budget s"
setup || exit 2
setup_s=$((SECONDS - started))
log "setup: done"
: > "$out/RESULTS.md"  # this run's sections only: append them to benchmarks/RESULTS.md

# limit OWN: a stage's seconds, cut to what the budget has left; 0 when under 30 s are left (the stage is skipped)
limit() {
    local left=$((budget - (SECONDS - started)))
    [ "$left" -lt 30 ] && { echo 0; return; }
    echo $(($1 < left ? $1 : left))
}

# stage NAME LIMIT LOG COMMAND...: run COMMAND under its limit, its output appended to LOG, and say how it ended
stage() {
    local name="$1" seconds="$2" file="$3"
    shift 3
    if [ "$seconds" -eq 0 ]; then
        log "$name: skipped, under 30 s of the $budget s budget left"
        return
    fi
    log "$name: started (limit $seconds s)"
    local begun=$SECONDS
    echo "=== $name: $*" >> "$file"
    timeout "$seconds" "$@" >> "$file" 2>&1
    local code=$?
    log "$name: exit $code$([ "$code" -eq 124 ] && echo ' (timed out)') after $((SECONDS - begun)) s"
}

if [ "$set_name" = probe ]; then  # the sandbox's CUDA first: the defences' tests after it say the rest
    stage "sandbox probe" "$(limit "${PROBE_LIMIT:-150}")" "$out/probe.log" \
        python3 benchmarks/gpu_sandbox_probe.py --out "$out"
fi

if [ "${#tests[@]}" -gt 0 ]; then
    # pytest gets what the budget leaves but 15 s: at its end SIGINT, so pytest still tears down and prints its
    # summary and durations, then SIGKILL 10 s later, and the record takes a second
    left=$((budget - (SECONDS - started) - 15))
    [ "$set_name" = smoke ] && test_timeout="${TEST_TIMEOUT:-150}" || test_timeout="${TEST_TIMEOUT:-400}"
    log "tests: ${tests[*]} $* (limit ${left} s, a test's most ${test_timeout} s)"
    export DICE_TEST_RECORD="$out" DICE_TEST_EARLY_BUILDS=1
    timeout -s INT -k 10 "$left" python3 -m pytest -m gpu -v --durations=25 --durations-min=1 \
        -o faulthandler_timeout="${HANG_DUMP:-90}" --timeout="$test_timeout" "${tests[@]}" "$@" >> "$out/tests.log" 2>&1
    code=$?
    log "tests: pytest exit $code$([ "$code" -eq 124 ] && echo ' (cut at the limit)') after $((SECONDS - started - setup_s)) s"
    touch "$out/failures.log" "$out/outcomes.jsonl"
    python3 benchmarks/gpu_record.py "$out/outcomes.jsonl" --set "$set_name${*:+ $*}" --card "$card" --commit "$commit" \
        --setup-s "$setup_s" --exit "$code" --ended "$(date +%s)" --results "$out/RESULTS.md" >> "$out/session.log" 2>&1 ||
        log "the record failed (session.log)"
fi

if [ "$set_name" = bench ]; then
    plain=""
    if [ -z "${SKIP_PLAIN:-}" ]; then
        # The plain cold load_inline build (two compiler jobs on the CPU) runs beside the GPU-bound decode benchmark
        seconds=$(limit 200)
        if [ "$seconds" -gt 0 ]; then
            log "plain build: started in the background (limit $seconds s)"
            timeout "$seconds" python3 benchmarks/build.py --only-plain --results "$out/RESULTS.md" \
                > "$out/plain_build.log" 2>&1 &
            plain=$!
        fi
    fi
    stage "decode benchmark" "$(limit "${DECODE_LIMIT:-150}")" "$out/decode.log" \
        python3 benchmarks/decode.py --results "$out/RESULTS.md"
    if [ -n "${PROFILE:-}" ]; then  # where a batch-1 block pass spends its time, kernel by kernel
        stage "decode profile" "$(limit 120)" "$out/decode.log" python3 benchmarks/decode.py --profile
    fi
    if [ -n "$plain" ]; then
        wait "$plain"
        log "plain build: exit $?"
        cat "$out/plain_build.log" >> "$out/build.log"
        rm -f "$out/plain_build.log"
    fi
    stage "build benchmark" "$(limit "${BUILD_LIMIT:-150}")" "$out/build.log" \
        python3 benchmarks/build.py --no-plain --repeats 5 --cache /tmp/dice-bench-cache --results "$out/RESULTS.md"
    if [ -n "${STEPS:-}" ]; then  # where a warm re-check's seconds go, command by command (the cache above is built)
        stage "re-check steps" "$(limit "${STEPS_LIMIT:-120}")" "$out/build.log" \
            python3 benchmarks/recheck_steps.py --cache /tmp/dice-bench-cache
    fi
fi
log "done in $((SECONDS - started)) s of a $budget s budget"
