#!/usr/bin/env bash
# One device call: every GPU test, then the harness and decode benchmarks; logs and RESULTS.md land in $OUT.
# Usage on the GPU machine, from the repo root: OUT=/some/dir bash benchmarks/gpu_session.sh [pytest -k expr]
set -uo pipefail
out="${OUT:-/tmp/dice-gpu}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$out/gpu.txt"

timeout "${TEST_LIMIT:-240}" python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts="--import-mode=importlib -ra" \
    ${1:+-k "$1"} tests 2>&1 | tee "$out/gpu_tests.log"
plain=""
if [ -z "${SKIP_BUILD:-}" ] && [ -z "${SKIP_PLAIN:-}" ]; then
    # the plain cold load_inline build (two compiler jobs on the CPU) runs beside the GPU-bound decode benchmark
    timeout 200 python3 benchmarks/build.py --only-plain --results "$out/plain.md" > "$out/plain_build.log" 2>&1 &
    plain=$!
fi
if [ -z "${SKIP_DECODE:-}" ]; then
    timeout "${DECODE_LIMIT:-240}" python3 benchmarks/decode.py 2>&1 | tee "$out/decode_bench.log"
fi
if [ -n "${PROFILE:-}" ]; then  # where a batch-1 block pass spends its time, kernel by kernel
    timeout 120 python3 benchmarks/decode.py --profile 2>&1 | tee "$out/decode_profile.log"
fi
if [ -n "$plain" ]; then
    wait "$plain"
    cat "$out/plain_build.log"
    tail -n +2 "$out/plain.md" >> benchmarks/RESULTS.md
fi
if [ -z "${SKIP_BUILD:-}" ]; then
    timeout "${BUILD_LIMIT:-240}" python3 benchmarks/build.py --no-plain --repeats 5 --cache /tmp/dice-bench-cache 2>&1 |
        tee "$out/build_bench.log"
    if [ -n "${STEPS:-}" ]; then  # where a warm re-check's seconds go, command by command (cache above is built)
        timeout "${STEPS_LIMIT:-120}" python3 benchmarks/recheck_steps.py --cache /tmp/dice-bench-cache 2>&1 |
            tee "$out/recheck_steps.log"
    fi
fi
cp benchmarks/RESULTS.md "$out/RESULTS.md"
