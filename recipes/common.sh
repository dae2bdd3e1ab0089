# Shared stages of the PageSum recipes: pagesum-preprocess -> fairseq-train ->
# fairseq-generate -> pagesum-score. Sourced by recipes/<experiment>.sh, which set the
# experiment's EXP_* variables and call `run_experiment NAME`.
#
# Environment (checked with a clear message before anything runs):
#   OUT_DIR       where every experiment writes <name>/data and <name>/<INIT>/...
#   BART_DIR      folder holding fairseq's BART releases, unpacked side by side:
#                   $BART_DIR/bart.large.cnn/{model.pt,dict.txt}
#                   $BART_DIR/bart.large/{model.pt,dict.txt}
#                 and GPT-2's BPE files $BART_DIR/encoder.json, $BART_DIR/vocab.bpe
#   NUM_GPUS      GPUs of this job (0: CPU). The effective batch stays 16 documents per
#                 update: --update-freq = 16 / (NUM_GPUS * BATCH_SIZE), and with more
#                 than one GPU fairseq's own distributed training runs them.
# Optional:
#   INIT          bart.large.cnn (PageSum, default) or bart.large (PageSum* in Table 1)
#   GPT2_BPE_DIR  where encoder.json and vocab.bpe are (default: $BART_DIR)
#   ARCH          model architecture (default: pagesum_bart_large)
#   BATCH_SIZE    documents per GPU per forward pass (default: 1)
#   GEN_BATCH_SIZE documents per generation batch (default: 4)
#   WORKERS       preprocessing processes (default: all cores)
#   FP16=1        mixed precision on GPUs
#   STAGES        subset of "preprocess train generate score" (default: all four)
#   PLAN=1        print the commands instead of running them (no file checks)
#   DRY_RUN=1     same command lines with tiny settings: short pages and summaries, two
#                 updates, beam 2; proves that every stage runs and that they chain
#   TRAIN_ARGS / GEN_ARGS   extra flags appended to fairseq-train / fairseq-generate
#
# Multi-GPU on one node: NUM_GPUS=8 bash recipes/arxiv.sh (fairseq spawns one process per
# GPU: --distributed-world-size 8). Multi-node, with the same script on every node:
#   torchrun:  set PAGESUM_LAUNCHER="torchrun --nnodes 2 --nproc-per-node 8
#              --rdzv-backend c10d --rdzv-endpoint HOST:29500" and NUM_GPUS=16;
#              fairseq reads RANK/WORLD_SIZE/MASTER_ADDR from torchrun (env://).
#   SLURM:     srun --nodes 2 --ntasks-per-node 1 --gpus-per-node 8 \
#                env NUM_GPUS=16 STAGES=train bash recipes/arxiv.sh
#              fairseq reads SLURM_JOB_NODELIST and picks the rank of each node
#              (add TRAIN_ARGS="--distributed-port 12345").
# Run the preprocess stage once before a multi-node train, and generate/score after it.

set -euo pipefail

PAGESUM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
USER_DIR=${USER_DIR:-$PAGESUM_ROOT/pagesum_plugin}
RECIPE=${RECIPE:-$(basename "$0" .sh)}
EFFECTIVE_BATCH=16  # documents per update, as in the paper

die() {
    echo "$RECIPE: $*" >&2
    exit 2
}

# require_var NAME "what it is": NAME must be set and non-empty.
require_var() {
    local name=$1 what=$2
    [ -n "${!name:-}" ] || die "set $name to $what (e.g. $name=/path bash recipes/$RECIPE.sh)"
}

# require_path KIND PATH "what it is": KIND is -f (file) or -d (folder). Skipped when PLAN=1.
require_path() {
    local kind=$1 path=$2 what=$3
    [ "${PLAN:-0}" = 1 ] && return 0
    test "$kind" "$path" || die "$what not found: $path"
}

require_count() {
    local name=$1
    [[ "${!name}" =~ ^[0-9]+$ ]] || die "$name must be a whole number, got '${!name}'"
}

# run CMD...: log the command (shell-quoted) to stderr and $LOG_COMMANDS, then run it.
run() {
    local line
    line=$(printf '%q ' "$@")
    if [ "${PLAN:-0}" = 1 ]; then
        echo "${line% }"
        return 0
    fi
    echo "+ ${line% }" >&2
    echo "${line% }" >>"$OUT_DIR/commands.sh"
    "$@"
}

stage_enabled() {
    [[ " ${STAGES:-preprocess train generate score} " == *" $1 "* ]]
}

# check_shared_settings: the environment every experiment needs.
check_shared_settings() {
    require_var OUT_DIR "the output folder"
    require_var BART_DIR "the folder holding bart.large.cnn/ and bart.large/ (fairseq's BART releases)"
    require_var NUM_GPUS "the number of GPUs of this job (0 for CPU)"
    require_count NUM_GPUS
    INIT=${INIT:-bart.large.cnn}
    case "$INIT" in
        bart.large.cnn | bart.large) ;;
        *) die "INIT must be bart.large.cnn (PageSum) or bart.large (PageSum*), got '$INIT'" ;;
    esac
    GPT2_BPE_DIR=${GPT2_BPE_DIR:-$BART_DIR}
    ARCH=${ARCH:-pagesum_bart_large}
    BATCH_SIZE=${BATCH_SIZE:-1}
    GEN_BATCH_SIZE=${GEN_BATCH_SIZE:-4}
    WORKERS=${WORKERS:-$(nproc)}
    require_count BATCH_SIZE
    require_path -f "$BART_DIR/$INIT/model.pt" "the $INIT checkpoint"
    require_path -f "$BART_DIR/$INIT/dict.txt" "the $INIT dictionary"
    require_path -f "$GPT2_BPE_DIR/encoder.json" "GPT-2's encoder.json (set GPT2_BPE_DIR)"
    require_path -f "$GPT2_BPE_DIR/vocab.bpe" "GPT-2's vocab.bpe (set GPT2_BPE_DIR)"
    set_batch_flags
    [ "${PLAN:-0}" = 1 ] || mkdir -p "$OUT_DIR"
}

# set_batch_flags: DEVICE_FLAGS and UPDATE_FREQ that keep 16 documents per update.
set_batch_flags() {
    local devices=$((NUM_GPUS > 0 ? NUM_GPUS : 1))
    (( BATCH_SIZE > 0 )) || die "BATCH_SIZE must be at least 1"
    (( EFFECTIVE_BATCH % (devices * BATCH_SIZE) == 0 )) ||
        die "NUM_GPUS ($NUM_GPUS) x BATCH_SIZE ($BATCH_SIZE) must divide the effective batch of $EFFECTIVE_BATCH documents"
    UPDATE_FREQ=$((EFFECTIVE_BATCH / (devices * BATCH_SIZE)))
    if (( NUM_GPUS == 0 )); then
        DEVICE_FLAGS=(--cpu)
    else
        DEVICE_FLAGS=(--distributed-world-size "$NUM_GPUS")
        [ "${FP16:-0}" = 1 ] && DEVICE_FLAGS+=(--fp16)
    fi
    return 0
}

# The experiment's settings, shrunk by DRY_RUN=1 (values only: the flags stay the same).
resolve_experiment_settings() {
    PAGE_TOKENS=$EXP_PAGE_TOKENS
    SUMMARY_TOKENS=$EXP_SUMMARY_TOKENS
    MIN_LEN=$EXP_MIN_LEN
    MAX_LEN=$EXP_MAX_LEN
    BEAM=4
    MAX_EPOCH=10
    WARMUP=10000
    STOP_FLAGS=()
    if [ "${DRY_RUN:-0}" = 1 ]; then
        # Short pages, whose sum over all pages also stays within 1024 tokens, so that
        # fairseq's size filter never drops a dry-run example.
        PAGE_TOKENS=$((1024 / EXP_MAX_PAGES < 48 ? 1024 / EXP_MAX_PAGES : 48))
        SUMMARY_TOKENS=32 MIN_LEN=2 MAX_LEN=12 BEAM=2 MAX_EPOCH=2 WARMUP=2
        STOP_FLAGS=(--max-update 2)
    fi
}

preprocess_stage() {
    local data=$1
    if [ "${PLAN:-0}" != 1 ] && [ -f "$data/meta.json" ]; then
        echo "$RECIPE: $data is already preprocessed (delete it to redo)" >&2
        return 0
    fi
    run pagesum-preprocess --input-format "$EXP_FORMAT" \
        --trainpref "$EXP_TRAIN" --validpref "$EXP_VALID" --testpref "$EXP_TEST" \
        --destdir "$data" "${EXP_PAGING[@]}" --max-page-tokens "$PAGE_TOKENS" \
        --max-summary-tokens "$SUMMARY_TOKENS" \
        --tokenizer gpt2 --gpt2-encoder-json "$GPT2_BPE_DIR/encoder.json" \
        --gpt2-vocab-bpe "$GPT2_BPE_DIR/vocab.bpe" --gpt2-dict "$BART_DIR/$INIT/dict.txt" \
        --workers "$WORKERS"
}

# The paper's fine-tuning: Adam with the Eq. 13 schedule (inverse_sqrt, peak 2e-5 after
# 10k warmup updates), label smoothing 0.1, 16 documents per update, 10 epochs, best
# checkpoint by validation loss. Dropout, weight decay, Adam's betas/eps and clipping
# follow fairseq's BART summarization fine-tuning, which the paper builds on.
train_stage() {
    local data=$1 run_dir=$2
    [ "${PLAN:-0}" = 1 ] || mkdir -p "$run_dir"
    # shellcheck disable=SC2086  # PAGESUM_LAUNCHER and TRAIN_ARGS are word lists
    run ${PAGESUM_LAUNCHER:-} fairseq-train "$data" --user-dir "$USER_DIR" \
        --task paged_summarization --max-pages "$EXP_MAX_PAGES" \
        --max-page-tokens "$PAGE_TOKENS" --max-summary-tokens "$SUMMARY_TOKENS" \
        --arch "$ARCH" "${EXP_MODEL_ARGS[@]}" \
        --finetune-from-model "$BART_DIR/$INIT/model.pt" \
        --criterion paged_label_smoothed_cross_entropy --label-smoothing 0.1 \
        --optimizer adam --adam-betas "(0.9, 0.999)" --adam-eps 1e-08 --weight-decay 0.01 \
        --clip-norm 0.1 --lr 2e-05 --lr-scheduler inverse_sqrt --warmup-updates "$WARMUP" \
        --dropout 0.1 --attention-dropout 0.1 \
        --batch-size "$BATCH_SIZE" --update-freq "$UPDATE_FREQ" --max-epoch "$MAX_EPOCH" \
        "${STOP_FLAGS[@]}" "${DEVICE_FLAGS[@]}" \
        --best-checkpoint-metric loss --no-epoch-checkpoints --seed 1 \
        --save-dir "$run_dir/checkpoints" --log-format simple --log-interval 100 \
        ${TRAIN_ARGS:-}
}

# Beam 4, length penalty 2.0, no repeated trigram, and the dataset's length range.
generate_stage() {
    local data=$1 run_dir=$2
    local gen_device=()
    (( NUM_GPUS == 0 )) && gen_device=(--cpu)
    [ "${FP16:-0}" = 1 ] && (( NUM_GPUS > 0 )) && gen_device=(--fp16)
    # shellcheck disable=SC2086
    run fairseq-generate "$data" --user-dir "$USER_DIR" \
        --task paged_summarization --max-pages "$EXP_MAX_PAGES" \
        --max-page-tokens "$PAGE_TOKENS" --max-summary-tokens "$SUMMARY_TOKENS" \
        --path "$run_dir/checkpoints/checkpoint_best.pt" --gen-subset test \
        --beam "$BEAM" --lenpen 2.0 --no-repeat-ngram-size 3 \
        --min-len "$MIN_LEN" --max-len-a 0 --max-len-b "$MAX_LEN" \
        --batch-size "$GEN_BATCH_SIZE" "${gen_device[@]}" \
        --hypotheses-output "$run_dir/test.hyp.txt" \
        --page-weights-output "$run_dir/test.page_weights.jsonl" \
        --results-path "$run_dir/generate" ${GEN_ARGS:-}
}

# ROUGE-1/2 and summary-level ROUGE-L (rougeLsum), the paper's setting.
score_stage() {
    local data=$1 run_dir=$2
    if [ "${PLAN:-0}" = 1 ]; then
        run pagesum-score --hyp "$run_dir/test.hyp.txt" --ref "$data/test.reference.txt" --json
        return 0
    fi
    run pagesum-score --hyp "$run_dir/test.hyp.txt" --ref "$data/test.reference.txt" --json \
        >"$run_dir/scores.json"
    cat "$run_dir/scores.json"
}

# run_experiment NAME: preprocess, train, generate and score one experiment.
#   EXP_FORMAT, EXP_TRAIN/EXP_VALID/EXP_TEST (native files), EXP_PAGING (pager flags),
#   EXP_MAX_PAGES, EXP_PAGE_TOKENS, EXP_SUMMARY_TOKENS, EXP_MIN_LEN, EXP_MAX_LEN,
#   EXP_MODEL_ARGS (extra model flags, may be empty), EXP_DATA_NAME (optional: the
#   experiment whose data folder to share).
run_experiment() {
    local name=$1
    resolve_experiment_settings
    # experiments that differ only in the model share one preprocessed copy of the data
    local data="$OUT_DIR/${EXP_DATA_NAME:-$name}/data" run_dir="$OUT_DIR/$name/$INIT"
    [ "${PLAN:-0}" = 1 ] && echo "# experiment: $name"
    [ "${PLAN:-0}" = 1 ] || echo "$RECIPE: experiment $name -> $OUT_DIR/$name" >&2
    if stage_enabled preprocess; then
        require_path -f "$EXP_TRAIN" "$name training split"
        require_path -f "$EXP_VALID" "$name validation split"
        require_path -f "$EXP_TEST" "$name test split"
        preprocess_stage "$data"
    fi
    if stage_enabled train; then
        require_path -f "$data/meta.json" "preprocessed data (run the preprocess stage)"
        train_stage "$data" "$run_dir" 2>&1 | tee_log "$run_dir/train.log"
    fi
    if stage_enabled generate; then
        require_path -f "$run_dir/checkpoints/checkpoint_best.pt" "a trained checkpoint (run the train stage)"
        generate_stage "$data" "$run_dir"
    fi
    if stage_enabled score; then
        score_stage "$data" "$run_dir"
    fi
}

# tee_log FILE: keep the training log while it streams (not in PLAN mode).
tee_log() {
    if [ "${PLAN:-0}" = 1 ]; then cat; else mkdir -p "$(dirname "$1")" && tee "$1"; fi
}

# raw_split DIR NAME VAR: the native file NAME in DIR, overridable by VAR.
raw_split() {
    local dir=$1 name=$2 var=$3
    echo "${!var:-$dir/$name}"
}
