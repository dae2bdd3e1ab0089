#!/usr/bin/env bash
# Every system side by side, on one corpus and one memory budget, as AWESOME compares its
# baselines (Cao and Wang, Section 4 and Appendix C.2): each system reads the longest input
# whose training step fits in the budget on this machine's device, then every system is
# trained alike (the same updates, effective batch and initial checkpoint), decodes the test
# split, and is scored by pagesum-score against a reference system.
# The settings live in recipes/config/compare.yaml (the systems, the shared training, the fit)
# and in each system's experiment YAML; decoding in pagesum_plugin/generation/defaults.py
# (pagesum-decoding-flags: the corpus's dataset row, per segment for AWESOME).
#
# Stages (STAGES, default all, in this order):
#   prepare   AWESOME's segments, oracle labels, salient-sentence extractor and its
#             predictions, into DATA_DIR (only when AWESOME is compared)
#   fit       per system, the longest input within BUDGET_MB: a bisection over multiples of
#             compare.yaml's unit, one training step each (pagesum-compare-fit,
#             the systems dealt over JOBS processes)
#   train     fairseq-hydra-train of every system that fits, on its fitted input
#   generate  fairseq-generate of the test split (the speed is in its log)
#   score     pagesum-score of every system, with p-values against the reference system
#   report    report.md, report.json, rouge_vs_memory.png, tokens_vs_memory.png
#             (pagesum-compare-report); its summary is printed at the end
#
# Environment (checked before anything runs):
#   DATA_DIR    a corpus written by pagesum-preprocess, with train, valid and test splits
#   BUDGET_MB   the memory one training step may use, in MB (2^20 bytes) of tensor memory on
#               the device: torch.cuda.max_memory_allocated on a GPU, torch's MemTracker on CPU
#               (AWESOME's 27 GB: 27648)
#   OUT_DIR     the comparison's outputs: <system>/{fit.json,checkpoints,*.log,test.hyp.txt,
#               scores.json}, the report, commands.sh, jobs/
#   BART_DIR    holds the checkpoint every system starts from: $BART_DIR/<INIT>/model.pt
#   NUM_GPUS    GPUs of this job (0: CPU); the fit measures one of them
# Optional:
#   SYSTEMS     the systems to compare, by compare.yaml's names (default: every one the
#               corpus can feed: HED and PageSum's document pages need clusters of documents,
#               PageSum's discourse pages need sections)
#   REFERENCE   the system the others are tested against (default: compare.yaml's)
#   INIT        the initial checkpoint's folder in BART_DIR (default: compare.yaml's)
#   MODEL_SIZE  every system's architecture at bart_large (the YAMLs'), bart_base or tiny
#   JOBS        commands of a stage run at once (default 1; keep 1 on a GPU, where the budget is
#               per device, and wherever speeds are reported: only then is each measured alone)
#   GEN_BATCH_SIZE, WORKERS, FP16=1, STAGES, PLAN=1, DRY_RUN=1, TRAIN_ARGS, GEN_ARGS:
#               as in recipes/common.sh (DRY_RUN's toy sizes are compare.yaml's dry_run section)
#
# The commands run through pagesum-run-jobs (recipes/run_jobs.py), which imports fairseq once and forks a child
# per command: the same command lines (PLAN=1 prints them; OUT_DIR/commands.sh and
# OUT_DIR/jobs/ record them), without paying the imports for each. Each command's full output
# goes to its log; the console shows a progress bar per phase and, at the end, the report.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

require_var DATA_DIR "a corpus written by pagesum-preprocess"
require_var BUDGET_MB "the memory budget of one training step in MB (27648 for 27 GB)" 27648
require_var OUT_DIR "the output folder"
require_var BART_DIR "the folder holding the initial checkpoint (\$BART_DIR/bart.large/model.pt)"
require_var NUM_GPUS "the number of GPUs of this job (0 for CPU)" 1
require_count NUM_GPUS
check_rendezvous_settings  # multi-GPU training meets through a file, its sockets on the private interface
require_count BUDGET_MB
(( BUDGET_MB > 0 )) || die "BUDGET_MB must be at least 1"
JOBS=${JOBS:-1}
require_count JOBS
(( JOBS > 0 )) || die "JOBS must be at least 1"
GEN_BATCH_SIZE=${GEN_BATCH_SIZE:-4}
require_count GEN_BATCH_SIZE
WORKERS=${WORKERS:-$(nproc)}
require_count WORKERS
STAGES=${STAGES:-prepare fit train generate score report}
for stage in $STAGES; do
    case "$stage" in
        prepare | fit | train | generate | score | report) ;;
        *) die "unknown stage '$stage' in STAGES (prepare fit train generate score report)" ;;
    esac
done
case "${MODEL_SIZE:-}" in
    "" | bart_large | bart_base | tiny) ;;
    *) die "MODEL_SIZE must be bart_large, bart_base or tiny, got '$MODEL_SIZE'" ;;
esac
require_path -f "$DATA_DIR/meta.json" "a corpus written by pagesum-preprocess (meta.json)"
for split in train valid test; do
    require_path -f "$DATA_DIR/$split.ids.txt" "the $split split of the corpus"
done

COMPARE_YAML=$CONFIG_DIR/compare.yaml
QUERY_FLAGS=()
[ "${DRY_RUN:-0}" = 1 ] && QUERY_FLAGS+=(--dry-run)
[ -n "${MODEL_SIZE:-}" ] && QUERY_FLAGS+=(--model-size "$MODEL_SIZE")
# compare_query QUERY ARGS...: what compare.yaml says (pagesum-compare-config, recipes/comparison/systems.py)
compare_query() {
    pagesum-compare-config "$COMPARE_YAML" ${QUERY_FLAGS[@]+"${QUERY_FLAGS[@]}"} "$@"
}

DEVICES=$((NUM_GPUS > 0 ? NUM_GPUS : 1))
settings=$(compare_query settings "$DEVICES") || exit 2
eval "$settings"  # DEFAULT_INIT DEFAULT_REFERENCE SIGNIFICANCE BATCH UPDATE_FREQ
INIT=${INIT:-$DEFAULT_INIT}
REFERENCE=${REFERENCE:-$DEFAULT_REFERENCE}
require_path -f "$BART_DIR/$INIT/model.pt" "the $INIT checkpoint"
plan_flag=()
[ "${PLAN:-0}" = 1 ] && plan_flag=(--plan)
# shellcheck disable=SC2086  # SYSTEMS is a word list
selected=$(compare_query select ${plan_flag[@]+"${plan_flag[@]}"} "$DATA_DIR" ${SYSTEMS:-}) || exit 2
read -r -a SELECTED <<<"$selected"
[[ " $selected " == *" $REFERENCE "* ]] || die "REFERENCE $REFERENCE is not among the systems compared: $selected"

if (( NUM_GPUS == 0 )); then
    DEVICE_OVERRIDES=(common.cpu=true common.fp16=false)
    FIT_DEVICE=(--device cpu)
    GEN_DEVICE=(--cpu)
    EXTRACT_DEVICE=(--cpu)
else
    DEVICE_OVERRIDES=(distributed_training.distributed_world_size="$NUM_GPUS")
    FIT_DEVICE=(--device cuda)
    GEN_DEVICE=()
    EXTRACT_DEVICE=()
    if [ "${FP16:-0}" = 1 ]; then
        DEVICE_OVERRIDES+=(common.fp16=true)
        FIT_DEVICE+=(--fp16)
        GEN_DEVICE=(--fp16)
    fi
fi
[ "${PLAN:-0}" = 1 ] || mkdir -p "$OUT_DIR/jobs"

# queue LOG CMD...: one command of the current phase, its output into LOG (PLAN=1: printed).
# queue_to FILE LOG CMD...: the same, its standard output into FILE.
queue() {
    local log=$1 line
    shift
    line=$(printf '%q ' "$@")
    add_job "$log" "${line% }"
}
queue_to() {
    local out=$1 log=$2 line
    shift 2
    line=$(printf '%q ' "$@")
    add_job "$log" "$line> $(printf '%q' "$out")"
}
add_job() {
    if [ "${PLAN:-0}" = 1 ]; then echo "$2"; else printf '%s\t%s\n' "$1" "$2" >>"$JOB_FILE"; fi
}
# barrier: the commands queued so far finish before the next ones start.
barrier() {
    [ "${PLAN:-0}" = 1 ] || echo >>"$JOB_FILE"
}
# phase NAME: start collecting the commands of a phase.
phase() {
    JOB_FILE=$OUT_DIR/jobs/$1.tsv
    [ "${PLAN:-0}" = 1 ] && echo "# phase: $1"
    [ "${PLAN:-0}" = 1 ] || : >"$JOB_FILE"
}
# run_phase TITLE: run the collected commands (pagesum-run-jobs), recorded in commands.sh.
run_phase() {
    [ "${PLAN:-0}" = 1 ] && return 0
    [ -s "$JOB_FILE" ] || return 0
    { echo "# $1: pagesum-run-jobs runs these from $JOB_FILE"; cut -f2 "$JOB_FILE" | sed '/^$/d'; } \
        >>"$OUT_DIR/commands.sh"
    run pagesum-run-jobs "$JOB_FILE" --parallel "$JOBS" --title "$1"
}
# ---- prepare and fit -------------------------------------------------------------------------

phase fit
if stage_enabled prepare && [[ " $selected " == *" awesome "* ]]; then
    IFS=$'\t' read -r extractor segmentation segment_flags extractor_overrides <<<"$(compare_query awesome awesome)"
    awesome_dir=$OUT_DIR/awesome/extractor
    embedding_device=()
    (( NUM_GPUS == 0 )) && embedding_device=(--device cpu)
    # shellcheck disable=SC2086  # flag and override lists
    queue "$awesome_dir/segment.log" pagesum-awesome-segment "$DATA_DIR" \
        --embedding-model "$segmentation" $segment_flags "${embedding_device[@]}"
    barrier
    queue "$awesome_dir/label.log" pagesum-awesome-label "$DATA_DIR" --workers "$WORKERS"
    barrier
    machine_overrides "$DATA_DIR" "$awesome_dir"
    # shellcheck disable=SC2086  # override lists
    queue "$awesome_dir/train.log" fairseq-hydra-train --config-dir "$CONFIG_DIR" --config-name "$extractor" \
        "${MACHINE[@]}" $extractor_overrides ${TRAIN_ARGS:-}
    barrier
    queue "$awesome_dir/extract.log" pagesum-awesome-extract "$DATA_DIR" \
        --path "$awesome_dir/checkpoints/checkpoint_best.pt" ${EXTRACT_DEVICE[@]+"${EXTRACT_DEVICE[@]}"}
    barrier
fi
if stage_enabled fit; then
    fit_flags=("${FIT_DEVICE[@]}")
    [ -n "${MODEL_SIZE:-}" ] && fit_flags+=(--model-size "$MODEL_SIZE")
    [ "${DRY_RUN:-0}" = 1 ] && fit_flags+=(--dry-run)
    # the systems dealt over JOBS processes, each fitting its share one after another
    for ((slot = 0; slot < JOBS && slot < ${#SELECTED[@]}; slot++)); do
        share=()
        for ((i = slot; i < ${#SELECTED[@]}; i += JOBS)); do share+=("${SELECTED[i]}"); done
        queue "$OUT_DIR/fit.$((slot + 1)).log" pagesum-compare-fit "$DATA_DIR" \
            --compare-config "$COMPARE_YAML" --systems "${share[@]}" --budget-mb "$BUDGET_MB" \
            --init-checkpoint "$BART_DIR/$INIT/model.pt" --out-dir "$OUT_DIR" "${fit_flags[@]}"
    done
fi
run_phase "prepare and fit"

# ---- train, generate, score, report ----------------------------------------------------------

stage_enabled train || stage_enabled generate || stage_enabled score || stage_enabled report || exit 0
[ "${PLAN:-0}" = 1 ] && echo "# systems not fitted yet are shown at the longest input they may read"
plan=$(compare_query plan "$OUT_DIR" "${SELECTED[@]}" ${plan_flag[@]+"${plan_flag[@]}"}) || exit 2
dataset=$(compare_query dataset ${plan_flag[@]+"${plan_flag[@]}"} "$DATA_DIR") || exit 2
declare -A DECODING  # the search of each kind of decoding: the dataset's generation defaults
DECODING[whole]=$(decoding_flags "$dataset")
DECODING[segments]=$(decoding_flags "$dataset" --per-segment)
FITTING=()
while IFS=$'\t' read -r key tokens _; do
    if (( tokens > 0 )); then FITTING+=("$key"); else
        echo "$RECIPE: $key does not fit in $BUDGET_MB MB even at its shortest input: it is not trained (the report says so)" >&2
    fi
done <<<"$plan"
[[ " ${FITTING[*]} " == *" $REFERENCE "* ]] ||
    die "the reference system $REFERENCE does not fit in $BUDGET_MB MB: choose another REFERENCE or a larger budget"

phase compare
if stage_enabled train; then
    while IFS=$'\t' read -r key tokens config _ overrides _; do
        (( tokens > 0 )) || continue
        machine_overrides "$DATA_DIR" "$OUT_DIR/$key"
        # shellcheck disable=SC2086  # override lists
        queue "$OUT_DIR/$key/train.log" fairseq-hydra-train --config-dir "$CONFIG_DIR" --config-name "$config" \
            "${MACHINE[@]}" $overrides ${TRAIN_ARGS:-}
    done <<<"$plan"
    barrier
fi
if stage_enabled generate; then
    while IFS=$'\t' read -r key tokens _ decoding _ flags; do
        (( tokens > 0 )) || continue
        run_dir=$OUT_DIR/$key
        # shellcheck disable=SC2086  # flag lists
        queue "$run_dir/generate.log" fairseq-generate "$DATA_DIR" --user-dir "$USER_DIR" ${DECODING[$decoding]} $flags \
            --path "$run_dir/checkpoints/checkpoint_best.pt" --gen-subset test --batch-size "$GEN_BATCH_SIZE" \
            ${GEN_DEVICE[@]+"${GEN_DEVICE[@]}"} --hypotheses-output "$run_dir/test.hyp.txt" \
            --results-path "$run_dir/generate" ${GEN_ARGS:-}
    done <<<"$plan"
    barrier
fi
if stage_enabled score; then
    for key in "${FITTING[@]}"; do
        against=()
        [ "$key" = "$REFERENCE" ] || against=(--compare "$OUT_DIR/$REFERENCE/test.hyp.txt")
        queue_to "$OUT_DIR/$key/scores.json" "$OUT_DIR/$key/score.log" pagesum-score --hyp "$OUT_DIR/$key/test.hyp.txt" \
            --ref "$DATA_DIR/test.reference.txt" ${against[@]+"${against[@]}"} --json
    done
    barrier
fi
if stage_enabled report; then
    queue "$OUT_DIR/report.log" pagesum-compare-report "$OUT_DIR" --data "$DATA_DIR" \
        --systems "${SELECTED[@]}" --reference "$REFERENCE" --significance "$SIGNIFICANCE"
fi
run_phase "train, generate, score, report"
if stage_enabled report && [ "${PLAN:-0}" != 1 ]; then
    echo
    cat "$OUT_DIR/summary.txt"
fi
