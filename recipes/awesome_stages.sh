# AWESOME's stages, sourced by the AWESOME recipes (recipes/<dataset>_awesome.sh) after
# common.sh; `run_awesome NAME` runs them on the dataset that use_dataset chose. Every setting
# lives in recipes/config/NAME.yaml (the summarizer) and recipes/config/NAME_extractor.yaml;
# decoding is the dataset's row of the generation defaults, per segment
# (pagesum_plugin/generation/defaults.py).
#
# Stages (STAGES, default all, in this order):
#   preprocess  pagesum-preprocess, as for every experiment
#   segment     Algorithm 1 with the YAML's sentence embedding model, and every reference
#               sentence assigned to its segment (pagesum-awesome-segment);
#               greedy-oracle labels of the salient sentences (pagesum-awesome-label)
#   extractor   fairseq-hydra-train of the extractor on those labels, then its salient
#               sentences for every split (pagesum-awesome-extract)
#   train       fairseq-hydra-train of AWESOME, fine-tuned from bart.large
#   generate    fairseq-generate, segment by segment
#   score       pagesum-score
# The salient sentences and the segmentation are the YAML's task.salient_sentences and
# task.segmentation, or what TRAIN_ARGS sets them to (task.salient_sentences=none: "attentive
# memory only"); training and decoding both use them. Without salient sentences the oracle
# labels and the extractor stage are skipped; with oracle ones, the extractor stage.
#
#   EXTRACTOR_ARCH   the extractor's architecture (default: the extractor YAML's model)

# task_value KEY: the summarizer's task.KEY as training sees it: the last TRAIN_ARGS
# override of it (task.KEY=, +task.KEY= or ++task.KEY=), else the YAML's value.
task_value() {
    local word value words
    value=$(EXP_CONFIG=$SUMMARIZER_CONFIG config value "task.$1")
    read -r -a words <<<"${TRAIN_ARGS:-}"
    for word in ${words[@]+"${words[@]}"}; do
        word=${word#++}
        word=${word#+}
        [[ "$word" == "task.$1="* ]] && value=${word#*=}
    done
    echo "$value"
}

device_flags() {
    if (( NUM_GPUS == 0 )); then echo "$1"; fi
}

# segment_stage DATA: Algorithm 1 and target assignment, and the oracle labels, once per corpus.
segment_stage() {
    local data=$1
    run pagesum-awesome-segment "$data" --embedding-model "$SEGMENTATION" \
        $(device_flags "--device cpu")
    if [ "${PLAN:-0}" != 1 ] && [ ! -f "$data/train.segments.$SEGMENTATION.npy" ]; then
        die "the sentence embedding model could not be loaded (see above): segments follow the length rule; " \
            "train with TRAIN_ARGS=task.segmentation=length, or install the model"
    fi
    if [ "$SALIENT" = none ]; then
        echo "$RECIPE: no salient sentences (task.salient_sentences=none): no oracle labels" >&2
    else
        run pagesum-awesome-label "$data" --workers "$WORKERS"
    fi
}

# awesome_train_stage DATA RUN_DIR: common.sh's train stage on EXP_CONFIG, its log kept.
awesome_train_stage() {
    train_stage "$1" "$2" 2>&1 | tee_log "$2/train.log"
}

# extractor_stage DATA RUN_DIR: train the extractor from BART's encoder (its own YAML: no
# SETTINGS, no TRAIN_ARGS), then write its salient sentences for every split.
extractor_stage() {
    local data=$1 run_dir=$2
    ARCH=${EXTRACTOR_ARCH:-} SETTINGS="" TRAIN_ARGS="" awesome_train_stage "$data" "$run_dir"
    run pagesum-awesome-extract "$data" --path "$run_dir/checkpoints/checkpoint_best.pt" \
        $(device_flags --cpu)
}

# awesome_generate_stage DATA RUN_DIR: segment-by-segment decoding with the YAML's task and the
# dataset's per-segment generation defaults.
awesome_generate_stage() {
    local data=$1 run_dir=$2
    local device=()
    (( NUM_GPUS == 0 )) && device=(--cpu)
    [ "${FP16:-0}" = 1 ] && (( NUM_GPUS > 0 )) && device=(--fp16)
    # shellcheck disable=SC2046,SC2086  # flag lists
    run fairseq-generate "$data" --user-dir "$USER_DIR" --task segmented_summarization \
        --segmentation "$SEGMENTATION" --salient-sentences "$SALIENT" \
        $(config task-flags max_input_tokens max_summary_tokens) \
        --path "$run_dir/checkpoints/checkpoint_best.pt" --gen-subset test \
        $(decoding_flags "${EXP_DATASET:-$EXP_FORMAT}" --system awesome --per-segment) \
        --batch-size "$GEN_BATCH_SIZE" "${device[@]}" \
        --hypotheses-output "$run_dir/test.hyp.txt" \
        --results-path "$run_dir/generate" ${GEN_ARGS:-}
}

# run_awesome_recipe DATASET NAME: the whole of an AWESOME recipe: check the environment (INIT
# defaults to bart.large), then run experiment NAME on DATASET.
run_awesome_recipe() {
    require_dataset "$1"
    INIT=${INIT:-bart.large}
    check_shared_settings
    use_dataset "$1"
    run_awesome "$2"
}

# run_awesome NAME: every enabled stage of experiment NAME (configs NAME and NAME_extractor).
run_awesome() {
    NAME=$1
    SUMMARIZER_CONFIG=$NAME
    EXTRACTOR_CONFIG=${NAME}_extractor
    STAGES=${STAGES:-preprocess segment extractor train generate score}
    local data="$OUT_DIR/$NAME/data" run_dir="$OUT_DIR/$NAME/$INIT"
    EXP_CONFIG=$SUMMARIZER_CONFIG
    SALIENT=$(task_value salient_sentences)
    SEGMENTATION=$(task_value segmentation)
    case "$SALIENT" in
        none | oracle | extractor) ;;
        *) die "task.salient_sentences must be none, oracle or extractor, got '$SALIENT'" ;;
    esac
    [ "${PLAN:-0}" = 1 ] && echo "# experiment: $NAME"
    [ "${PLAN:-0}" = 1 ] || echo "$RECIPE: experiment $NAME -> $OUT_DIR/$NAME" >&2
    if stage_enabled preprocess; then
        require_raw_splits "$NAME"
        preprocess_stage "$data"
    fi
    if stage_enabled segment; then
        require_path -f "$data/meta.json" "preprocessed data (run the preprocess stage)"
        segment_stage "$data"
    fi
    if stage_enabled extractor && [ "$SALIENT" != extractor ]; then
        echo "$RECIPE: salient sentences: $SALIENT, so no extractor: skipping the extractor stage" >&2
    elif stage_enabled extractor; then
        require_path -f "$data/train.salient.oracle.npy" "oracle labels (run the segment stage)"
        EXP_CONFIG=$EXTRACTOR_CONFIG
        set_batch_flags
        extractor_stage "$data" "$run_dir/extractor"
        EXP_CONFIG=$SUMMARIZER_CONFIG
    fi
    if stage_enabled train; then
        require_path -f "$data/train.segments.$SEGMENTATION.npy" "the segments (run the segment stage)"
        case "$SALIENT" in
            extractor) require_path -f "$data/train.salient.extractor.npy" \
                "the extractor's salient sentences (run the extractor stage)" ;;
            oracle) require_path -f "$data/train.salient.oracle.npy" "the oracle's salient sentences (run the segment stage)" ;;
        esac
        set_batch_flags
        awesome_train_stage "$data" "$run_dir"
    fi
    generate_and_score "$data" "$run_dir" awesome_generate_stage
}
