#!/usr/bin/env bash
# PageSum end to end on a laptop CPU, on the 250 real ACL papers that the aclsum
# package ships (title = summary, body sections = pages):
#
#   setup -> pagesum-preprocess -> fairseq-train (a small PageSum from scratch, with a
#   sentencepiece vocabulary) -> fairseq-generate (page-combined beam search) ->
#   pagesum-score (model and Lead-3) -> pagesum-plot page-importance -> a report that ends
#   in a verdict: whether the model learned to read its papers (recipes/demo_report.py).
#
# Everything goes to outputs/demo/. The same commands as recipes/<dataset>.sh, at a size
# that runs in minutes on two cores. The console shows one line (or progress bar) per
# stage, then the report; every tool's full output goes to outputs/demo/logs/, and a stage
# that fails prints the end of its log. Options (environment):
#   LOCALITY        discourse (default: one page per section) or spatial
#   SUMMARY         title (default: the paper's title) or N (the abstract's first N sentences)
#   TRAIN_UPDATES   updates of training at most (default: 500; the same on any machine, so a
#                   slow machine takes longer instead of training less); training stops five
#                   epochs after the lowest validation loss, whose checkpoint is decoded
#   VOCAB_SIZE      sentencepiece vocabulary (default: 4000)
#   DEMO_DIR        output folder (default: outputs/demo)
#   SKIP_SETUP=1    use the active Python environment instead of running setup.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. recipes/outputs.sh
START=$SECONDS

LOCALITY=${LOCALITY:-discourse}
TRAIN_UPDATES=${TRAIN_UPDATES:-500}
VOCAB_SIZE=${VOCAB_SIZE:-4000}
SUMMARY=${SUMMARY:-title}
DEMO_DIR=${DEMO_DIR:-outputs/demo}
case "$LOCALITY" in
    discourse) PAGING=(--locality discourse --max-pages 8) ;;
    spatial) PAGING=(--locality spatial --num-pages 8) ;;
    *) echo "demo: LOCALITY must be discourse or spatial, got '$LOCALITY'" >&2; exit 2 ;;
esac
[[ "$SUMMARY" == title || "$SUMMARY" =~ ^[1-9][0-9]*$ ]] || { echo "demo: SUMMARY must be title or a number of sentences, got '$SUMMARY'" >&2; exit 2; }
[[ "$TRAIN_UPDATES" =~ ^[1-9][0-9]*$ ]] || { echo "demo: TRAIN_UPDATES must be a whole number, got '$TRAIN_UPDATES'" >&2; exit 2; }

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

# Small enough for two CPU cores: 8 pages of 128 tokens, and a summary that 200 papers can
# teach in minutes: the paper's title (about 10 words; at most 40 tokens, decoded to 5-40), or
# with SUMMARY=N the abstract's first N sentences (at most 40 tokens a sentence, decoded to 20+).
PAGE_TOKENS=128
if [ "$SUMMARY" = title ]; then
    SUMMARY_TOKENS=40 MIN_LEN=5 WHAT="the paper's title"
else
    SUMMARY_TOKENS=$((40 * SUMMARY)) MIN_LEN=20 WHAT="the abstract's first $SUMMARY sentences"
fi
DECODING="--beam 4 --lenpen 1.0 --no-repeat-ngram-size 3 --min-len $MIN_LEN --max-len-a 0 --max-len-b $SUMMARY_TOKENS"
PAPERS=$DEMO_DIR/papers DATA=$DEMO_DIR/data-$LOCALITY RUN=$DEMO_DIR/run-$LOCALITY
mkdir -p "$DEMO_DIR" "$RUN"

step "splitting the 250 aclsum papers by file name: 200 train / 25 valid / 25 test; summary = $WHAT"
python - "$PAPERS" "$SUMMARY" >"$LOGS/split.log" <<'EOF'
import json, shutil, sys
from pathlib import Path

import aclsum

from pagesum_plugin.corpus.sentences import split_sentences

papers = sorted((Path(aclsum.__file__).parent / "dataset" / "paper_jsons").glob("*.json"))
splits = {"train": papers[:200], "valid": papers[200:225], "test": papers[225:250]}
summary = sys.argv[2]  # title, or a number of the abstract's sentences
for split, paths in splits.items():
    folder = Path(sys.argv[1]) / split
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for path in paths:
        paper = json.loads(path.read_text(encoding="utf-8"))
        abstract = paper["abstract"]
        if isinstance(abstract, list):  # S2ORC's pdf_parse style: [{"text": ...}, ...]
            abstract = "\n".join(part["text"] for part in abstract)
        # the summary the model learns, in the field that pagesum-preprocess reads as the summary
        if summary == "title":
            paper["abstract"] = paper["title"].strip()
        else:
            paper["abstract"] = " ".join(split_sentences(abstract)[: int(summary)])
        (folder / path.name).write_text(json.dumps(paper), encoding="utf-8")
    print(f"{split}: {len(paths)} papers")
EOF

step "pagesum-preprocess: $LOCALITY pages, sentencepiece vocabulary of $VOCAB_SIZE"
rm -rf "$DATA"
quietly preprocess pagesum-preprocess --input-format aclsum --trainpref "$PAPERS/train" --validpref "$PAPERS/valid" \
    --testpref "$PAPERS/test" --destdir "$DATA" "${PAGING[@]}" --max-page-tokens $PAGE_TOKENS \
    --max-summary-tokens $SUMMARY_TOKENS --tokenizer sentencepiece --vocab-size "$VOCAB_SIZE" --workers 2

# The model: 2 + 2 pre-norm layers of width 128 (pagesum_tiny), sharing one embedding table.
# fairseq's BART starts every weight at N(0, 0.02), which suits a width of 1024 but at width 128
# leaves each attention's value and output projections so small that the decoder hears almost
# nothing from the pages: from that start, 500 updates taught a language model of abstracts and
# one summary for every paper. So the demo starts from a scale-preserving (Xavier) draw, saved
# as a checkpoint that fairseq-train fine-tunes (--finetune-from-model).
MODEL=(--user-dir pagesum_plugin --task paged_summarization --max-page-tokens $PAGE_TOKENS
    --max-summary-tokens $SUMMARY_TOKENS --arch pagesum_tiny --encoder-embed-dim 128 --encoder-ffn-embed-dim 256
    --decoder-embed-dim 128 --decoder-ffn-embed-dim 256 --share-all-embeddings --encoder-normalize-before
    --decoder-normalize-before --seed 1 --cpu)

step "fairseq-train: a small PageSum from scratch, for $TRAIN_UPDATES updates"
rm -rf "$RUN/checkpoints"
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
        if name.endswith("embed_tokens.weight"):
            torch.nn.init.normal_(weight, std=weight.shape[1] ** -0.5)
            weight[model.encoder.dictionary.pad()].zero_()
        elif weight.dim() == 2 and "embed_positions" not in name:
            torch.nn.init.xavier_uniform_(weight)
save_checkpoint(sys.argv[1], args, model)
print(f"{sys.argv[1]}: {sum(p.numel() for p in model.parameters()):,} parameters")
EOF
pagesum-run-stage train "$LOGS/train.log" --updates "$TRAIN_UPDATES" -- fairseq-train "$DATA" "${MODEL[@]}" \
    --finetune-from-model "$RUN/init.pt" \
    --criterion paged_label_smoothed_cross_entropy --label-smoothing 0.1 \
    --optimizer adam --adam-betas "(0.9, 0.98)" --lr 2e-3 --lr-scheduler inverse_sqrt --warmup-updates 60 \
    --dropout 0.1 --clip-norm 1.0 --batch-size 8 --max-update "$TRAIN_UPDATES" \
    --num-workers 0 --best-checkpoint-metric loss --no-epoch-checkpoints --patience 5 \
    --save-dir "$RUN/checkpoints" --log-format simple --log-interval 5

step "fairseq-generate: page-combined beam search on the 25 held-out papers"
quietly generate fairseq-generate "$DATA" --user-dir pagesum_plugin --task paged_summarization \
    --max-page-tokens $PAGE_TOKENS --max-summary-tokens $SUMMARY_TOKENS \
    --path "$RUN/checkpoints/checkpoint_best.pt" --gen-subset test --cpu \
    $DECODING --batch-size 5 --hypotheses-output "$RUN/test.hyp.txt" \
    --page-weights-output "$RUN/test.page_weights.jsonl" --results-path "$RUN/generate"

step "pagesum-baseline: Lead-3"
quietly baseline pagesum-baseline --input "$DATA" --split test --method lead --k 3 --out "$RUN/test.lead3.txt"

step "pagesum-score: the model, then Lead-3, against the references ($WHAT)"
to_file "$RUN/scores.model.json" pagesum-score --hyp "$RUN/test.hyp.txt" --ref "$DATA/test.reference.txt" --json 2>"$LOGS/score.log"
to_file "$RUN/scores.lead3.json" pagesum-score --hyp "$RUN/test.lead3.txt" --ref "$DATA/test.reference.txt" --json 2>>"$LOGS/score.log"

step "pagesum-plot page-importance: the first test paper"
quietly plot pagesum-plot page-importance --weights "$RUN/test.page_weights.jsonl" --id "$(head -n 1 "$DATA/test.ids.txt")" \
    --out "$RUN/page_importance.png"

step "report"
to_file "$RUN/report.txt" python -m pagesum_recipes.demo_report "$DATA" "$RUN" "$LOGS" "$((SECONDS - START))" \
    "$TRAIN_UPDATES" "$WHAT" 2>"$LOGS/report.log" || { cat "$LOGS/report.log" >&2; exit 1; }
cat "$RUN/report.txt"
