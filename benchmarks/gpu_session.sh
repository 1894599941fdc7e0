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
if [ -z "${SKIP_DECODE:-}" ]; then
    timeout "${DECODE_LIMIT:-150}" python3 benchmarks/decode.py 2>&1 | tee "$out/decode_bench.log"
fi
if [ -z "${SKIP_BUILD:-}" ]; then
    timeout "${BUILD_LIMIT:-240}" python3 benchmarks/build.py --no-plain --repeats 5 --cache /tmp/dice-bench-cache 2>&1 |
        tee "$out/build_bench.log"
    # where a warm re-check's seconds go, command by command (the cache above holds its build already)
    timeout "${STEPS_LIMIT:-120}" python3 benchmarks/recheck_steps.py --cache /tmp/dice-bench-cache 2>&1 |
        tee "$out/recheck_steps.log"
fi
cp benchmarks/RESULTS.md "$out/RESULTS.md"
