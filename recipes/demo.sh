#!/usr/bin/env bash
# PageSum end to end on a laptop CPU, on the 250 real ACL papers that the aclsum package
# ships (body sections = pages):
#
#   setup -> pagesum-preprocess (the papers, and a copying corpus made of their pages) ->
#   fairseq-train twice (a small PageSum from scratch: first it learns to copy a page's
#   opening, then which page's opening to write) -> fairseq-generate (page-combined beam
#   search) -> pagesum-score (model, Lead-3 and the extract it learns, against the abstracts)
#   -> pagesum-plot page-importance -> a report that ends in a verdict: whether the model
#   learned to read its papers (recipes/demo_report.py).
#
# Why this task: a model trained from scratch on 200 papers cannot learn to write abstracts in
# minutes; it writes one generic abstract for every paper. It can learn to copy, and then to
# pick the page to copy from, which is PageSum's page weighting at work (docs/recipes.md).
#
# Everything goes to outputs/demo/. The console shows one line (or progress bar) per stage,
# then the report; every tool's full output goes to outputs/demo/logs/, and a stage that fails
# prints the end of its log. Options (environment):
#   SUMMARY         extract (default: the opening of the page most like the abstract), title,
#                   or N (the abstract's first N sentences, which the model does not learn)
#   COPY_UPDATES    updates of the copying stage (default: 1000)
#   TRAIN_UPDATES   updates of the summary stage at most (default: 300); it stops four epochs
#                   after the lowest validation loss, whose checkpoint is decoded. Both are
#                   the same on any machine: a slow machine takes longer instead of training less
#   VOCAB_SIZE      sentencepiece vocabulary (default: 4000)
#   DEMO_DIR        output folder (default: outputs/demo)
#   SKIP_SETUP=1    use the active Python environment instead of running setup.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. recipes/outputs.sh
START=$SECONDS

SUMMARY=${SUMMARY:-extract}
COPY_UPDATES=${COPY_UPDATES:-1000}
TRAIN_UPDATES=${TRAIN_UPDATES:-300}
VOCAB_SIZE=${VOCAB_SIZE:-4000}
DEMO_DIR=${DEMO_DIR:-outputs/demo}
[[ "$SUMMARY" == extract || "$SUMMARY" == title || "$SUMMARY" =~ ^[1-9][0-9]*$ ]] || { echo "demo: SUMMARY must be extract, title or a number of sentences, got '$SUMMARY'" >&2; exit 2; }
for name in COPY_UPDATES TRAIN_UPDATES VOCAB_SIZE; do
    [[ "${!name}" =~ ^[1-9][0-9]*$ ]] || { echo "demo: $name must be a whole number, got '${!name}'" >&2; exit 2; }
done
# One thread per process: a model this small gains little from two, and two threads spin-wait
# for each other whenever anything else runs on the cores (20 to 30 times slower here).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

LOGS=$DEMO_DIR/logs
mkdir -p "$LOGS"

step() { printf '[%3ds] %s\n' $((SECONDS - START)) "$*"; }

# quietly NAME CMD...: run one stage with its output in $LOGS/NAME.log (pagesum-run-stage).
quietly() {
    local name=$1
    shift
    pagesum-run-stage "$name" "$LOGS/$name.log" -- "$@"
}

step "setup (log: $LOGS/setup.log)"
if [ "${SKIP_SETUP:-0}" != 1 ]; then
    bash setup.sh >"$LOGS/setup.log" 2>&1 || { tail -n 40 "$LOGS/setup.log" >&2; echo "setup failed; full log: $LOGS/setup.log" >&2; exit 1; }
    . .venv/bin/activate
fi

# Small enough for two CPU cores: 8 pages (sections) of 128 tokens, summaries of 48 tokens.
PAGES=8 PAGE_TOKENS=128 SUMMARY_TOKENS=48
case "$SUMMARY" in
    extract) WHAT="the opening of the page most like the abstract" ;;
    title) WHAT="the paper's title" ;;
    *) WHAT="the abstract's first $SUMMARY sentences" SUMMARY_TOKENS=$((48 * SUMMARY)) ;;
esac
DECODING="--beam 4 --lenpen 1.0 --no-repeat-ngram-size 3 --min-len 5 --max-len-a 0 --max-len-b $SUMMARY_TOKENS"
PAPERS=$DEMO_DIR/papers COPY=$DEMO_DIR/copy DATA=$DEMO_DIR/data COPY_DATA=$DEMO_DIR/data-copy RUN=$DEMO_DIR/run
mkdir -p "$RUN"

step "splitting the 250 aclsum papers by file name: 200 train / 25 valid / 25 test; summary = $WHAT"
quietly split pagesum-demo-data "$PAPERS" "$COPY" --summary "$SUMMARY" --max-pages $PAGES

step "pagesum-preprocess: the papers, one page a section, sentencepiece vocabulary of $VOCAB_SIZE"
rm -rf "$DATA" "$COPY_DATA"
quietly preprocess pagesum-preprocess --input-format jsonl --dataset aclsum --trainpref "$PAPERS/train.jsonl" \
    --validpref "$PAPERS/valid.jsonl" --testpref "$PAPERS/test.jsonl" --destdir "$DATA" --locality discourse \
    --max-pages $PAGES --max-page-tokens $PAGE_TOKENS --max-summary-tokens $SUMMARY_TOKENS \
    --tokenizer sentencepiece --vocab-size "$VOCAB_SIZE" --workers 2
step "pagesum-preprocess: the copying corpus (each page alone, its opening the summary), same vocabulary"
quietly preprocess-copy pagesum-preprocess --input-format jsonl --trainpref "$COPY/train.jsonl" \
    --validpref "$COPY/valid.jsonl" --destdir "$COPY_DATA" --locality discourse --max-pages 1 \
    --max-page-tokens $PAGE_TOKENS --max-summary-tokens $SUMMARY_TOKENS --tokenizer sentencepiece \
    --sentencepiece-model "$DATA/sentencepiece.model" --workers 2

# The model: 2 + 2 pre-norm layers of width 128 (pagesum_tiny), sharing one embedding table.
# fairseq's BART starts every weight at N(0, 0.02), which suits a width of 1024 but at width 128
# leaves each attention's value and output projections so small that the decoder hears almost
# nothing from the pages. So the demo starts from a scale-preserving (Xavier) draw, saved as a
# checkpoint that fairseq-train fine-tunes (--finetune-from-model).
MODEL=(--user-dir pagesum_plugin --task paged_summarization --max-page-tokens $PAGE_TOKENS
    --max-summary-tokens $SUMMARY_TOKENS --arch pagesum_tiny --encoder-embed-dim 128 --encoder-ffn-embed-dim 256
    --decoder-embed-dim 128 --decoder-ffn-embed-dim 256 --share-all-embeddings --encoder-normalize-before
    --decoder-normalize-before --seed 1 --cpu)
TRAINING=(--criterion paged_label_smoothed_cross_entropy --optimizer adam --adam-betas "(0.9, 0.98)"
    --lr-scheduler inverse_sqrt --dropout 0.1 --clip-norm 1.0 --num-workers 0 --best-checkpoint-metric loss
    --no-epoch-checkpoints --no-save-optimizer-state --log-format simple --log-interval 5)

step "a small PageSum from scratch: a Xavier draw ($RUN/init.pt)"
rm -rf "$RUN/checkpoints" "$RUN/checkpoints-copy"
mkdir -p "$RUN/checkpoints"
python - "$RUN/init.pt" "$DATA" "${MODEL[@]}" >"$LOGS/init.log" 2>&1 <<'EOF' || { tail -n 40 "$LOGS/init.log" >&2; exit 1; }
import sys

import torch
from fairseq import options, tasks

from pagesum_plugin.checkpoints.builder import save_checkpoint

args = options.parse_args_and_arch(options.get_training_parser(), input_args=sys.argv[2:])
torch.manual_seed(args.seed)
model = tasks.setup_task(args).build_model(args)
with torch.no_grad():
    for name, weight in model.named_parameters():
        if name.endswith("embed_tokens.weight"):  # (vocabulary, 128)
            torch.nn.init.normal_(weight, std=weight.shape[1] ** -0.5)
            weight[model.encoder.dictionary.pad()].zero_()
        elif weight.dim() == 2 and "embed_positions" not in name:  # (out, in) projections
            torch.nn.init.xavier_uniform_(weight)
save_checkpoint(sys.argv[1], args, model)
print(f"{sys.argv[1]}: {sum(p.numel() for p in model.parameters()):,} parameters")
EOF

step "fairseq-train: learning to copy a page's opening, $COPY_UPDATES updates"
pagesum-run-stage train-copy "$LOGS/train-copy.log" --updates "$COPY_UPDATES" -- fairseq-train "$COPY_DATA" \
    "${MODEL[@]}" --finetune-from-model "$RUN/init.pt" "${TRAINING[@]}" --label-smoothing 0 --lr 2e-3 \
    --warmup-updates 60 --batch-size 16 --max-update "$COPY_UPDATES" --validate-interval 1000 \
    --save-dir "$RUN/checkpoints-copy"

step "fairseq-train: the summaries, from the copying model, $TRAIN_UPDATES updates at most"
pagesum-run-stage train "$LOGS/train.log" --updates "$TRAIN_UPDATES" -- fairseq-train "$DATA" "${MODEL[@]}" \
    --finetune-from-model "$RUN/checkpoints-copy/checkpoint_last.pt" "${TRAINING[@]}" --label-smoothing 0.1 \
    --lr 3e-4 --warmup-updates 30 --batch-size 8 --max-update "$TRAIN_UPDATES" --patience 4 \
    --save-dir "$RUN/checkpoints"

step "fairseq-generate: page-combined beam search on the 25 held-out papers"
quietly generate fairseq-generate "$DATA" --user-dir pagesum_plugin --task paged_summarization \
    --max-page-tokens $PAGE_TOKENS --max-summary-tokens $SUMMARY_TOKENS \
    --path "$RUN/checkpoints/checkpoint_best.pt" --gen-subset test --cpu \
    $DECODING --batch-size 5 --hypotheses-output "$RUN/test.hyp.txt" \
    --page-weights-output "$RUN/test.page_weights.jsonl" --results-path "$RUN/generate"

step "pagesum-baseline: Lead-3"
quietly baseline pagesum-baseline --input "$DATA" --split test --method lead --k 3 --out "$RUN/test.lead3.txt"

step "pagesum-score: the model, Lead-3 and the summaries it learns ($WHAT), against the abstracts"
ABSTRACTS=$PAPERS/test.abstract.txt
: >"$LOGS/score.log"
for name in model lead3 target; do
    case $name in model) hyp=$RUN/test.hyp.txt ;; lead3) hyp=$RUN/test.lead3.txt ;; target) hyp=$DATA/test.reference.txt ;; esac
    to_file "$RUN/scores.$name.json" pagesum-score --hyp "$hyp" --ref "$ABSTRACTS" --json 2>>"$LOGS/score.log" \
        || { tail -n 20 "$LOGS/score.log" >&2; exit 1; }
done

step "pagesum-plot page-importance: the first test paper"
quietly plot pagesum-plot page-importance --weights "$RUN/test.page_weights.jsonl" --id "$(head -n 1 "$DATA/test.ids.txt")" \
    --out "$RUN/page_importance.png"

step "report"
to_file "$RUN/report.txt" pagesum-demo-report "$DATA" "$RUN" "$LOGS" --seconds $((SECONDS - START)) \
    --updates "$TRAIN_UPDATES" --what "$WHAT" --abstracts "$ABSTRACTS" 2>"$LOGS/report.log" \
    || { cat "$LOGS/report.log" >&2; exit 1; }
cat "$RUN/report.txt"
