# Shared stages of the recipes: pagesum-preprocess -> fairseq-hydra-train ->
# fairseq-generate -> pagesum-score. Sourced by recipes/<experiment>.sh, which name the
# dataset's files and call `run_experiment NAME [CONFIG]`. Every setting of an experiment
# (view, model, optimization) lives in recipes/config/<CONFIG>.yaml, and its decoding
# settings in pagesum_plugin/generation/defaults.py; this file adds only paths, devices
# and the DRY_RUN=1 toy sizes.
#
# Environment (checked with a clear message before anything runs):
#   OUT_DIR       where every experiment writes <name>/data and <name>/<INIT>/...
#   BART_DIR      folder holding fairseq's BART releases, unpacked side by side:
#                   $BART_DIR/bart.large.cnn/{model.pt,dict.txt}
#                   $BART_DIR/bart.large/{model.pt,dict.txt}
#                 and GPT-2's BPE files $BART_DIR/encoder.json, $BART_DIR/vocab.bpe
#   NUM_GPUS      GPUs of this job (0: CPU). The YAML's documents per update stay the
#                 same: update_freq = effective batch / (NUM_GPUS * BATCH_SIZE), and with
#                 more than one GPU fairseq's own distributed training runs them.
# Optional:
#   INIT          bart.large.cnn (PageSum, default) or bart.large (PageSum* in Table 1)
#   GPT2_BPE_DIR  where encoder.json and vocab.bpe are (default: $BART_DIR)
#   ARCH          model architecture (default: the YAML's model._name)
#   BATCH_SIZE    documents per GPU per forward pass (default: the YAML's dataset.batch_size)
#   GEN_BATCH_SIZE documents per generation batch (default: 4)
#   WORKERS       preprocessing processes (default: all cores)
#   FP16=1        mixed precision on GPUs
#   STAGES        subset of "preprocess train generate score" (default: all four)
#   PLAN=1        print the commands instead of running them (no file checks)
#   DRY_RUN=1     same command lines with tiny settings: short pages and summaries, two
#                 updates, beam 2; proves that every stage runs and that they chain
#   SETTINGS      named alternatives to the YAML's values, comma-separated, from
#                 recipes/config/settings/: fairseq (fairseq's BART fine-tuning values in
#                 place of the authors'), adafactor (Adafactor in place of Adam),
#                 placeholder_pages (the authors' "." pages, in training and decoding)
#   TRAIN_ARGS    extra Hydra overrides for fairseq-hydra-train (e.g. optimization.clip_norm=0.1)
#   GEN_ARGS      extra flags appended to fairseq-generate
#
# Multi-GPU on one node: NUM_GPUS=8 bash recipes/arxiv.sh (fairseq spawns one process per
# GPU: --distributed-world-size 8). Multi-node: the same script on every node, OUT_DIR on
# storage that every node sees, PAGESUM_IFACE the job's private network interface:
#   by hand:   NUM_GPUS=16 NUM_NODES=2 NODE_RANK=0|1 PAGESUM_JOB_ID=run1 PAGESUM_IFACE=ib0 \
#                STAGES=train bash recipes/arxiv.sh
#   SLURM:     srun --nodes 2 --ntasks-per-node 1 --gpus-per-node 8 \
#                env NUM_GPUS=16 PAGESUM_IFACE=ib0 STAGES=train bash recipes/arxiv.sh
#              (NODE_RANK, NUM_NODES and the job id come from SLURM_NODEID,
#              SLURM_JOB_NUM_NODES and SLURM_JOB_ID)
# The rendezvous binds to the job's private interface, never to a public port: the processes meet
# through a file in the run folder, and gloo's and NCCL's sockets bind to PAGESUM_IFACE (lo
# on one node). torchrun is not used: its rendezvous store listens on every interface whatever
# address it is given, and fairseq's rendezvous takes no password.
# Run the preprocess stage once before a multi-node train, and generate/score after it.

set -euo pipefail

PAGESUM_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$PAGESUM_ROOT/recipes/outputs.sh"
USER_DIR=${USER_DIR:-$PAGESUM_ROOT/pagesum_plugin}
CONFIG_DIR=$PAGESUM_ROOT/recipes/config
RECIPE=${RECIPE:-$(basename "$0" .sh)}

die() {
    echo "$RECIPE: $*" >&2
    exit 2
}

# require_var NAME "what it is" [EXAMPLE]: NAME must be set and non-empty.
require_var() {
    local name=$1 what=$2 example=${3:-/path}
    [ -n "${!name:-}" ] || die "set $name to $what (e.g. $name=$example bash recipes/$RECIPE.sh)"
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
    require_var NUM_GPUS "the number of GPUs of this job (0 for CPU)" 1
    require_count NUM_GPUS
    check_rendezvous_settings
    INIT=${INIT:-bart.large.cnn}
    case "$INIT" in
        bart.large.cnn | bart.large) ;;
        *) die "INIT must be bart.large.cnn (PageSum) or bart.large (PageSum*), got '$INIT'" ;;
    esac
    GPT2_BPE_DIR=${GPT2_BPE_DIR:-$BART_DIR}
    GEN_BATCH_SIZE=${GEN_BATCH_SIZE:-4}
    WORKERS=${WORKERS:-$(nproc)}
    [ -z "${BATCH_SIZE:-}" ] || require_count BATCH_SIZE
    export SETTINGS=${SETTINGS:-}  # pagesum-experiment answers for the YAML with these applied
    local name
    for name in ${SETTINGS//,/ }; do
        [ -f "$PAGESUM_ROOT/recipes/config/settings/$name.yaml" ] ||
            die "SETTINGS: no settings named '$name' (see recipes/config/settings/)"
    done
    require_path -f "$BART_DIR/$INIT/model.pt" "the $INIT checkpoint"
    require_path -f "$BART_DIR/$INIT/dict.txt" "the $INIT dictionary"
    require_path -f "$GPT2_BPE_DIR/encoder.json" "GPT-2's encoder.json (set GPT2_BPE_DIR)"
    require_path -f "$GPT2_BPE_DIR/vocab.bpe" "GPT-2's vocab.bpe (set GPT2_BPE_DIR)"
    [ "${PLAN:-0}" = 1 ] || mkdir -p "$OUT_DIR"
}

# config QUERY [ARG]: what the experiment's YAML says (pagesum-experiment, recipes/experiment_config.py).
config() {
    pagesum-experiment "$CONFIG_DIR/$EXP_CONFIG.yaml" "$@"
}

# decoding_flags DATASET [--system MODEL] [--per-segment]: the dataset's (and system's) row of the generation defaults as
# fairseq-generate flags (pagesum-decoding-flags; DRY_RUN=1: its toy search).
decoding_flags() {
    local toy=()
    [ "${DRY_RUN:-0}" = 1 ] && toy=(--dry-run)
    pagesum-decoding-flags "$@" ${toy[@]+"${toy[@]}"}
}

# set_batch_flags: the per-device batch and --update-freq that keep the YAML's documents
# per update on NUM_GPUS devices, and the device overrides.
set_batch_flags() {
    local devices=$((NUM_GPUS > 0 ? NUM_GPUS : 1)) effective
    effective=$(config effective-batch)
    BATCH=${BATCH_SIZE:-$(config batch-size)}
    (( BATCH > 0 )) || die "BATCH_SIZE must be at least 1"
    (( effective % (devices * BATCH) == 0 )) ||
        die "NUM_GPUS ($NUM_GPUS) x BATCH_SIZE ($BATCH) must divide the effective batch of $effective documents"
    UPDATE_FREQ=$((effective / (devices * BATCH)))
    if (( NUM_GPUS == 0 )); then
        DEVICE_OVERRIDES=(common.cpu=true common.fp16=false)
    else
        DEVICE_OVERRIDES=(distributed_training.distributed_world_size="$NUM_GPUS")
        [ "${FP16:-0}" = 1 ] && DEVICE_OVERRIDES+=(common.fp16=true)
    fi
    return 0
}

preprocess_stage() {
    local data=$1
    if [ "${PLAN:-0}" != 1 ] && [ -f "$data/meta.json" ]; then
        echo "$RECIPE: $data is already preprocessed (delete it to redo)" >&2
        return 0
    fi
    # shellcheck disable=SC2046  # the view flags are a word list
    run pagesum-preprocess --input-format "$EXP_FORMAT" --dataset "${EXP_DATASET:-$EXP_FORMAT}" \
        --trainpref "$EXP_TRAIN" --validpref "$EXP_VALID" --testpref "$EXP_TEST" \
        --destdir "$data" $(config view-flags preprocess) \
        --tokenizer gpt2 --gpt2-encoder-json "$GPT2_BPE_DIR/encoder.json" \
        --gpt2-vocab-bpe "$GPT2_BPE_DIR/vocab.bpe" --gpt2-dict "$BART_DIR/$INIT/dict.txt" \
        --workers "$WORKERS"
}

# machine_overrides DATA RUN_DIR: MACHINE, the overrides that place a training run on this
# machine: its data, checkpoints and initial weights, its devices and the batch split.
machine_overrides() {
    local data=$1 run_dir=$2
    rendezvous_overrides "$run_dir"
    MACHINE=(common.user_dir="$USER_DIR" task.data="$(realpath -m "$data")"
        checkpoint.save_dir="$(realpath -m "$run_dir/checkpoints")"
        checkpoint.finetune_from_model="$(realpath -m "$BART_DIR/$INIT/model.pt")"
        hydra.run.dir="$(realpath -m "$run_dir/hydra")" hydra.job.chdir=false
        dataset.batch_size="$BATCH" "optimization.update_freq=[$UPDATE_FREQ]" "${DEVICE_OVERRIDES[@]}"
        ${RENDEZVOUS[@]+"${RENDEZVOUS[@]}"})
}

# check_rendezvous_settings: where the processes of a multi-GPU training will meet, bound to
# the job's private interface: RDZV_JOB (the rendezvous file's name), RDZV_RANK (this node's
# first rank), and gloo's and NCCL's sockets on PAGESUM_IFACE (exported; lo on one node).
check_rendezvous_settings() {
    local nodes=${NUM_NODES:-${SLURM_JOB_NUM_NODES:-1}} node=${NODE_RANK:-${SLURM_NODEID:-0}} iface
    (( NUM_GPUS > 1 )) || return 0
    [ -z "${PAGESUM_LAUNCHER:-}" ] || die "PAGESUM_LAUNCHER is not supported: torchrun's rendezvous store listens on \
every interface; run this script on every node with NUM_NODES and NODE_RANK (see recipes/README.md)"
    [[ "$nodes" =~ ^[1-9][0-9]*$ && "$node" =~ ^[0-9]+$ ]] && (( node < nodes )) ||
        die "NODE_RANK ($node) must be a whole number below NUM_NODES ($nodes)"
    (( NUM_GPUS % nodes == 0 )) || die "NUM_GPUS ($NUM_GPUS) must be a multiple of NUM_NODES ($nodes)"
    if (( nodes > 1 )); then
        require_var PAGESUM_IFACE "the job's private network interface, which its nodes share" ib0
        RDZV_JOB=${SLURM_JOB_ID:-${PAGESUM_JOB_ID:-}}
        [ -n "$RDZV_JOB" ] || die "set PAGESUM_JOB_ID to one name for this job on every node (SLURM sets SLURM_JOB_ID)"
        iface=$PAGESUM_IFACE
    else
        RDZV_JOB=$$ iface=${PAGESUM_IFACE:-lo}
    fi
    RDZV_RANK=$((node * NUM_GPUS / nodes))
    export GLOO_SOCKET_IFNAME=$iface NCCL_SOCKET_IFNAME=$iface
    if [ "${PLAN:-0}" = 1 ]; then echo "export GLOO_SOCKET_IFNAME=$iface NCCL_SOCKET_IFNAME=$iface"; fi
}

# rendezvous_overrides RUN_DIR: RENDEZVOUS, the overrides that make a multi-GPU training meet
# through a file in RUN_DIR (torch's FileStore: no port is opened) at this node's first rank.
rendezvous_overrides() {
    RENDEZVOUS=()
    (( NUM_GPUS > 1 )) || return 0
    RENDEZVOUS=(distributed_training.distributed_init_method="file://$(realpath -m "$1/rendezvous.$RDZV_JOB")"
        distributed_training.distributed_rank="$RDZV_RANK")
}

# Training: fairseq-hydra-train with the experiment's YAML; the command line adds only
# paths, devices, the batch split and (DRY_RUN=1) toy sizes.
train_stage() {
    local data=$1 run_dir=$2
    [ "${PLAN:-0}" = 1 ] || mkdir -p "$run_dir"
    machine_overrides "$data" "$run_dir"
    local overrides=("${MACHINE[@]}")
    if [ -n "${ARCH:-}" ]; then overrides+=(model._name="$ARCH"); fi
    # shellcheck disable=SC2207  # the overrides are a word list
    [ -n "${SETTINGS:-}" ] && overrides+=($(config settings-overrides "$SETTINGS"))
    # shellcheck disable=SC2207  # the overrides are a word list
    [ "${DRY_RUN:-0}" = 1 ] && overrides+=($(config dry-run-overrides))
    # shellcheck disable=SC2086  # TRAIN_ARGS is a word list
    run fairseq-hydra-train --config-dir "$CONFIG_DIR" --config-name "$EXP_CONFIG" "${overrides[@]}" ${TRAIN_ARGS:-}
}

# Decoding: the experiment's view, and the row of the generation defaults of the dataset and
# the system that the experiment trains (pagesum_plugin/generation/defaults.py).
generate_stage() {
    local data=$1 run_dir=$2
    local device=() toy=""
    (( NUM_GPUS == 0 )) && device=(--cpu)
    [ "${FP16:-0}" = 1 ] && (( NUM_GPUS > 0 )) && device=(--fp16)
    [ "${DRY_RUN:-0}" = 1 ] && toy=$(config dry-run-flags)
    # shellcheck disable=SC2046,SC2086  # flag lists
    run fairseq-generate "$data" --user-dir "$USER_DIR" --task paged_summarization \
        $(config view-flags generate) \
        --path "$run_dir/checkpoints/checkpoint_best.pt" --gen-subset test \
        $(decoding_flags "${EXP_DATASET:-$EXP_FORMAT}" --system "$(config system "${ARCH:-}")") $toy \
        --batch-size "$GEN_BATCH_SIZE" "${device[@]}" \
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
    to_file "$run_dir/scores.json" run pagesum-score --hyp "$run_dir/test.hyp.txt" --ref "$data/test.reference.txt" \
        --json
    cat "$run_dir/scores.json"
}

# run_experiment NAME: preprocess, train, generate and score one experiment.
#   EXP_FORMAT, EXP_TRAIN/EXP_VALID/EXP_TEST (native files); CONFIG (the YAML of
#   recipes/config/, default NAME: every training, view and model setting lives there);
#   EXP_DATA_NAME (optional: the experiment whose corpus to share; views are chosen when
#   the data loads, so experiments on one dataset share one corpus).
run_experiment() {
    local name=$1
    EXP_CONFIG=${2:-$name}
    [ -f "$CONFIG_DIR/$EXP_CONFIG.yaml" ] || die "no settings for experiment $name: $CONFIG_DIR/$EXP_CONFIG.yaml"
    if stage_enabled preprocess; then  # every file is checked before anything runs
        require_raw_splits "$name"
    fi
    set_batch_flags
    # experiments that differ only in the model share one preprocessed copy of the data
    local data="$OUT_DIR/${EXP_DATA_NAME:-$name}/data" run_dir="$OUT_DIR/$name/$INIT"
    [ "${PLAN:-0}" = 1 ] && echo "# experiment: $name"
    [ "${PLAN:-0}" = 1 ] || echo "$RECIPE: experiment $name -> $OUT_DIR/$name" >&2
    if stage_enabled preprocess; then
        preprocess_stage "$data"
    fi
    if stage_enabled train; then
        require_path -f "$data/meta.json" "preprocessed data (run the preprocess stage)"
        train_stage "$data" "$run_dir" 2>&1 | tee_log "$run_dir/train.log"
    fi
    generate_and_score "$data" "$run_dir" generate_stage
}

# require_raw_splits NAME: the experiment's native train, validation and test files exist.
require_raw_splits() {
    require_path -f "$EXP_TRAIN" "$1 training split"
    require_path -f "$EXP_VALID" "$1 validation split"
    require_path -f "$EXP_TEST" "$1 test split"
}

# generate_and_score DATA RUN_DIR GENERATE: the generate stage (the function GENERATE, which
# decodes the test split with the trained checkpoint) and the score stage, where enabled.
generate_and_score() {
    local data=$1 run_dir=$2 generate=$3
    if stage_enabled generate; then
        require_path -f "$run_dir/checkpoints/checkpoint_best.pt" "a trained checkpoint (run the train stage)"
        "$generate" "$data" "$run_dir"
    fi
    if stage_enabled score; then
        score_stage "$data" "$run_dir"
    fi
}

# run_recipe DATASET EXPERIMENT: the whole of a recipe that runs one experiment on one
# dataset: check the environment, then run the experiment's stages.
run_recipe() {
    require_dataset "$1"
    check_shared_settings
    use_dataset "$1"
    run_experiment "$2"
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

# require_dataset NAME: the dataset's folder variable (<NAME>_DIR) must be set.
require_dataset() {
    case "$1" in
        arxiv) require_var ARXIV_DIR "the arXiv folder (train.txt, val.txt, test.txt)" ;;
        pubmed) require_var PUBMED_DIR "the PubMed folder (train.txt, val.txt, test.txt)" ;;
        govreport) require_var GOVREPORT_DIR "the GovReport folder (train.jsonl, valid.jsonl, test.jsonl)" ;;
        multinews) require_var MULTINEWS_DIR "the Multi-News folder (train.src, train.tgt, val.src, ...)" ;;
        wcep) require_var WCEP_DIR "the WCEP folder, in pagesum's jsonl format (train.jsonl, valid.jsonl, test.jsonl)" ;;
        multixscience) require_var MULTIXSCIENCE_DIR \
            "the Multi-XScience folder, in pagesum's jsonl format (train.jsonl, valid.jsonl, test.jsonl)" ;;
        *) die "unknown dataset '$1'" ;;
    esac
}

# use_dataset NAME: EXP_FORMAT, EXP_DATASET and the three split files of the dataset's own
# release layout, or of pagesum's jsonl format for datasets read through it (each overridable
# by <NAME>_TRAIN, <NAME>_VALID, <NAME>_TEST).
use_dataset() {
    local name=$1 prefix dir
    prefix=$(echo "$name" | tr '[:lower:]' '[:upper:]')
    dir="${prefix}_DIR"
    local train valid test
    EXP_FORMAT=$name
    case "$name" in
        arxiv | pubmed) train=train.txt valid=val.txt test=test.txt ;;
        govreport) train=train.jsonl valid=valid.jsonl test=test.jsonl ;;
        multinews) train=train.src valid=val.src test=test.src ;;
        wcep | multixscience) train=train.jsonl valid=valid.jsonl test=test.jsonl EXP_FORMAT=jsonl ;;
        *) die "unknown dataset '$name'" ;;
    esac
    EXP_DATASET=$name
    EXP_TRAIN=$(raw_split "${!dir}" "$train" "${prefix}_TRAIN")
    EXP_VALID=$(raw_split "${!dir}" "$valid" "${prefix}_VALID")
    EXP_TEST=$(raw_split "${!dir}" "$test" "${prefix}_TEST")
}
