#!/usr/bin/env bash
# How the bundled default model is made (issue 9), in two device calls on one GPU machine, from the repo root:
#   OUT=/some/dir bash benchmarks/default_model.sh train   # tasks, template check + curate sample, tokenizer, SFT
#   OUT=/some/dir bash benchmarks/default_model.sh more    # continue a training run paused by STOP_AFTER
#   OUT=/some/dir bash benchmarks/default_model.sh eval    # dice-lsp eval on the held-out split
#   OUT=/some/dir bash benchmarks/default_model.sh all     # both in one call; EVAL_LIMIT (seconds) or DEADLINE (epoch seconds)
#                                                            bound the eval
#   OUT=/some/dir bash benchmarks/default_model.sh curate    # `dice-lsp data curate` on CURATE (48) training tasks (seed 4)
#   OUT=/some/dir bash benchmarks/default_model.sh continue  # more SFT from engine/bundled's weights on fresh tasks
#                                                            (seed SEED), then eval of the result and of engine/bundled
#                                                            on the same held-out tasks
# `train` leaves the run in $WORK and packs final/ into $OUT/model.tar.part-* (device files are at most 16 MiB);
# `eval` scores $WORK/run/final, or engine/bundled when the machine was restarted in between. Each stage's logs
# come back as one tar, $OUT/logs-STAGE.tar (a device call returns at most 8 files).
# Knobs (environment): STOP_AFTER, FAVOR_FAST (template speedups JSON; empty: draw templates evenly), CHECKS,
#   PER_TEMPLATE, VERIFY_TEMPLATES (check only these family/template names), VERIFY_SHAPES (only instances of this
#   shape class, e.g. last), EVAL_STATE (resume an eval from an earlier call's eval-state.tar), EVAL_BATCH (samples
#   built, then checked, at a time), TASKS, HELDOUT, TRAIN_SECONDS, BATCH, LR, CUTOFF, BUDGET, WORKERS, INIT_ARGS.
set -uo pipefail
stage="${1:?usage: default_model.sh train|more|eval|all|continue|curate}"
out="${OUT:-/tmp/dice-default-out}"
work="${WORK:-/tmp/dice-default}"
logs="$work/logs"
mkdir -p "$out" "$work" "$logs"
export PYTHONUNBUFFERED=1 CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" DICE_LSP_CACHE="$work/cache"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
dice() { python3 -m dice_lsp "$@"; }
workers="${WORKERS:-12}"  # leave cores to the training loop

train() {
    # Templates are drawn in proportion to their measured speedup against eager (clamped to 0.25-2): half of them
    # were slower than eager PyTorch on the H200 (RESULTS.md), and a model learns the speed of what it is shown.
    local favor=()
    [ -n "${FAVOR_FAST-benchmarks/default_model/template_speedups.json}" ] &&
        favor=(--favor-fast "${FAVOR_FAST-benchmarks/default_model/template_speedups.json}")
    dice data tasks "$work/train.jsonl" --force --count "${TASKS:-20000}" --seed 1 "${favor[@]}" | tee "$logs/tasks.log"
    rm -rf "$work/heldout"
    dice data tasks "$work/heldout" --kernelbench --split heldout --count "${HELDOUT:-48}" --seed 2 | tee -a "$logs/tasks.log"
    # The GPU checks of the data run beside training, on the CPU cores it leaves: every template (PER_TEMPLATE instances,
    # benchmarks/tasks_verify.py), then `dice-lsp data curate` on the first 48 training tasks.
    head -n 48 "$work/train.jsonl" >"$work/sample.jsonl"
    (
        [ "${CHECKS:-1}" = 0 ] && exit 0  # CHECKS=0: a dry run of the recipe on a machine without a GPU
        # shellcheck disable=SC2086
        timeout 300 python3 benchmarks/tasks_verify.py --per-template "${PER_TEMPLATE:-1}" --workers "$workers" \
            ${VERIFY_TEMPLATES:+--templates $VERIFY_TEMPLATES} ${VERIFY_SHAPES:+--shape-class $VERIFY_SHAPES} \
            --json "$logs/template_speedups.json" \
            >"$logs/verify.log" 2>&1
        timeout 200 python3 -m dice_lsp data curate "$work/sample.jsonl" "$work/curated.jsonl" --force --min-speedup 0 \
            --workers "$workers" >"$logs/curate.log" 2>&1
    ) &
    checks=$!
    # shellcheck disable=SC2086
    dice train init --data "$work/train.jsonl" --out "$work/init" --force ${INIT_ARGS:-} | tee "$logs/init.log"
    sft --no-resume
    echo "$checks" >"$work/checks.pid"
}

# SFT for TRAIN_SECONDS in all; STOP_AFTER (seconds) ends this call's piece early, and `more` continues the run on
# the same machine in the next call, the learning rate still scheduled over all of TRAIN_SECONDS.
sft() {
    dice train sft --model "$work/init" --data "$work/train.jsonl" --out "$work/run" --no-progress "$@" \
        --time-limit "${TRAIN_SECONDS:-300}" ${STOP_AFTER:+--stop-after "$STOP_AFTER"} --epochs 50 \
        --batch-size "${BATCH:-32}" --lr "${LR:-1e-3}" --warmup-steps 50 --weight-decay 0.1 \
        --cutoff "${CUTOFF:-3072}" --token-budget "${BUDGET:-24576}" --save-every 100000 2>&1 | tee -a "$logs/sft.log"
    rm -f "$out"/model.tar.part-*
    tar -C "$work/run" -cf - final metrics.jsonl loss.png | split -b 15m - "$out/model.tar.part-"
}

# The data checks may outlast training (each GPU check takes seconds after its build): `all` evaluates meanwhile.
finish_checks() {
    local pid
    pid=$(cat "$work/checks.pid" 2>/dev/null) && while kill -0 "$pid" 2>/dev/null; do
        if [ -n "${DEADLINE:-}" ] && [ "$(date +%s)" -ge $((DEADLINE - 10)) ]; then
            pkill -P "$pid"; kill "$pid"; echo "data checks stopped at the deadline" >>"$logs/verify.log"; break
        fi
        sleep 2
    done
    cp benchmarks/RESULTS.md "$work/curated.jsonl" "$logs/" 2>/dev/null
    tar -C "$work" -cf "$out/logs-train.tar" logs
}

evaluate() {
    # The eval always names one path ($work/model -> the run's final/ or engine/bundled), so a later call on a fresh
    # machine resumes its records: EVAL_STATE names the eval-state.tar an earlier call left in its $OUT.
    # Arguments (optional): the model directory and the eval's name (its folder under $WORK and its files in $OUT).
    local model="${1:-$work/run/final}" name="${2:-eval}"
    [ -d "$model" ] || model="$PWD/engine/bundled"
    ln -sfn "$model" "$work/model-$name"
    [ -n "${EVAL_STATE:-}" ] && [ ! -d "$work/$name" ] && tar -C "$work" -xf "$EVAL_STATE"
    [ -d "$work/heldout" ] || dice data tasks "$work/heldout" --kernelbench --split heldout --count "${HELDOUT:-48}" --seed 2
    # Re-running resumes the same --out, so an eval cut short by EVAL_LIMIT goes on where it stopped.
    local limit="${EVAL_LIMIT:-3000}"
    [ -n "${DEADLINE:-}" ] && limit=$((DEADLINE - 15 - $(date +%s)))  # DEADLINE: epoch seconds when the call must end
    timeout "$limit" python3 -m dice_lsp eval "$work/heldout" --model "$work/model-$name" --out "$work/$name" \
        --workers "$workers" ${EVAL_BATCH:+--batch "$EVAL_BATCH"} --quiet 2>&1 | tee "$logs/$name.log"
    mkdir -p "$logs/$name"
    cp "$work/$name/table.md" "$work/$name/samples.jsonl" "$work/$name/chart.png" "$logs/$name/" 2>/dev/null
    tar -C "$work" -cf "$out/logs-$name.tar" logs
    tar -C "$work" -cf "$out/$name-state.tar" "$name"
}

# More SFT from the bundled model's weights and tokenizer, on fresh tasks of the training split (the held-out split
# never enters), at a lower learning rate; then both models on the same held-out tasks, in the same call.
more_from_bundled() {
    dice data tasks "$work/train.jsonl" --force --count "${TASKS:-12000}" --seed "${SEED:-4}" | tee "$logs/tasks.log"
    rm -rf "$work/heldout"
    dice data tasks "$work/heldout" --kernelbench --split heldout --count "${HELDOUT:-40}" --seed 2 | tee -a "$logs/tasks.log"
    cp -r engine/bundled "$work/init"
    LR="${LR:-3e-4}" sft --no-resume
    evaluate "$work/run/final" eval-continued
    evaluate "$PWD/engine/bundled" eval-bundled
}

# The curate step on its own: a sample of the training tasks through the harness on the GPU, counts and reasons kept.
curate_sample() {
    dice data tasks "$work/sample.jsonl" --force --count "${CURATE:-48}" --seed "${SEED:-4}" | tee "$logs/curate.log"
    timeout "${CURATE_LIMIT:-400}" python3 -m dice_lsp data curate "$work/sample.jsonl" "$work/curated.jsonl" --force \
        --min-speedup 0 --workers "$workers" --no-progress 2>&1 | tee -a "$logs/curate.log"
    cp "$work/curated.jsonl" "$logs/" 2>/dev/null
    tar -C "$work" -cf "$out/logs-curate.tar" logs
}

case "$stage" in
    train) train && finish_checks ;;
    more) sft && finish_checks ;;
    eval) evaluate "${EVAL_MODEL:-$work/run/final}" "${EVAL_NAME:-eval}" ;;
    all) train && evaluate; finish_checks ;;
    continue) more_from_bundled ;;
    curate) curate_sample ;;
    *) echo "unknown stage $stage: use train, more, eval, all, continue or curate" >&2; exit 2 ;;
esac
