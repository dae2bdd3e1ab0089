#!/usr/bin/env bash
# PageSum end to end on a laptop CPU, on the 250 real ACL papers that the aclsum
# package ships (abstract = summary, body sections = pages):
#
#   setup -> pagesum-preprocess -> fairseq-train (a small PageSum from scratch, with a
#   sentencepiece vocabulary) -> fairseq-generate (page-combined beam search) ->
#   pagesum-score (model and Lead-3) -> pagesum-plot page-importance -> a short report.
#
# Everything goes to outputs/demo/. The same commands as recipes/<dataset>.sh, at a size
# that runs in minutes on two cores. The console shows one line (or progress bar) per
# stage, then the report; every tool's full output goes to outputs/demo/logs/, and a stage
# that fails prints the end of its log. Options (environment):
#   LOCALITY        discourse (default: one page per section) or spatial
#   TRAIN_UPDATES   updates of training (default: 500; the same on any machine, so a slow
#                   machine takes longer instead of training less)
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
DEMO_DIR=${DEMO_DIR:-outputs/demo}
case "$LOCALITY" in
    discourse) PAGING=(--locality discourse --max-pages 8) ;;
    spatial) PAGING=(--locality spatial --num-pages 8) ;;
    *) echo "demo: LOCALITY must be discourse or spatial, got '$LOCALITY'" >&2; exit 2 ;;
esac
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

# Small enough for two CPU cores: 8 pages of 128 tokens, summaries of 160 tokens, decoded with
# aclsum's row of the generation defaults (60 to 160 tokens).
PAGE_TOKENS=128 SUMMARY_TOKENS=160
DECODING=$(pagesum-decoding-flags aclsum)
PAPERS=$DEMO_DIR/papers DATA=$DEMO_DIR/data-$LOCALITY RUN=$DEMO_DIR/run-$LOCALITY
mkdir -p "$DEMO_DIR" "$RUN"

step "splitting the 250 aclsum papers by file name: 200 train / 25 valid / 25 test"
python - "$PAPERS" >"$LOGS/split.log" <<'EOF'
import os, shutil, sys
from pathlib import Path

import aclsum

papers = sorted((Path(aclsum.__file__).parent / "dataset" / "paper_jsons").glob("*.json"))
splits = {"train": papers[:200], "valid": papers[200:225], "test": papers[225:250]}
for split, paths in splits.items():
    folder = Path(sys.argv[1]) / split
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for path in paths:
        shutil.copyfile(path, folder / path.name)
    print(f"{split}: {len(paths)} papers")
EOF

step "pagesum-preprocess: $LOCALITY pages, sentencepiece vocabulary of $VOCAB_SIZE"
rm -rf "$DATA"
quietly preprocess pagesum-preprocess --input-format aclsum --trainpref "$PAPERS/train" --validpref "$PAPERS/valid" \
    --testpref "$PAPERS/test" --destdir "$DATA" "${PAGING[@]}" --max-page-tokens $PAGE_TOKENS \
    --max-summary-tokens $SUMMARY_TOKENS --tokenizer sentencepiece --vocab-size "$VOCAB_SIZE" --workers 2

step "fairseq-train: a small PageSum from scratch, for $TRAIN_UPDATES updates"
rm -rf "$RUN/checkpoints"
pagesum-run-stage train "$LOGS/train.log" --updates "$TRAIN_UPDATES" -- fairseq-train "$DATA" --user-dir pagesum_plugin --task paged_summarization \
    --max-page-tokens $PAGE_TOKENS --max-summary-tokens $SUMMARY_TOKENS \
    --arch pagesum_tiny --encoder-embed-dim 128 --encoder-ffn-embed-dim 256 --decoder-embed-dim 128 \
    --decoder-ffn-embed-dim 256 --share-all-embeddings \
    --criterion paged_label_smoothed_cross_entropy --label-smoothing 0.1 \
    --optimizer adam --adam-betas "(0.9, 0.98)" --lr 2e-3 --lr-scheduler inverse_sqrt --warmup-updates 60 \
    --dropout 0.1 --clip-norm 1.0 --batch-size 8 --max-update "$TRAIN_UPDATES" \
    --cpu --num-workers 0 --seed 1 --best-checkpoint-metric loss --no-epoch-checkpoints \
    --save-dir "$RUN/checkpoints" --log-format simple --log-interval 5

step "fairseq-generate: page-combined beam search on the 25 held-out papers"
quietly generate fairseq-generate "$DATA" --user-dir pagesum_plugin --task paged_summarization \
    --max-page-tokens $PAGE_TOKENS --max-summary-tokens $SUMMARY_TOKENS \
    --path "$RUN/checkpoints/checkpoint_best.pt" --gen-subset test --cpu \
    $DECODING --batch-size 5 --hypotheses-output "$RUN/test.hyp.txt" \
    --page-weights-output "$RUN/test.page_weights.jsonl" --results-path "$RUN/generate"

step "pagesum-baseline: Lead-3"
quietly baseline pagesum-baseline --input "$DATA" --split test --method lead --k 3 --out "$RUN/test.lead3.txt"

step "pagesum-score: the model, then Lead-3, against the abstracts"
to_file "$RUN/scores.model.json" pagesum-score --hyp "$RUN/test.hyp.txt" --ref "$DATA/test.reference.txt" --json 2>"$LOGS/score.log"
to_file "$RUN/scores.lead3.json" pagesum-score --hyp "$RUN/test.lead3.txt" --ref "$DATA/test.reference.txt" --json 2>>"$LOGS/score.log"

step "pagesum-plot page-importance: the first test paper"
quietly plot pagesum-plot page-importance --weights "$RUN/test.page_weights.jsonl" --id "$(head -n 1 "$DATA/test.ids.txt")" \
    --out "$RUN/page_importance.png"

step "report"
to_file "$RUN/report.txt" python - "$DATA" "$RUN" "$LOGS" "$((SECONDS - START))" "$TRAIN_UPDATES" 2>"$LOGS/report.log" <<'EOF'
import json, os, re, sys
from pathlib import Path
from statistics import mean

from pagesum_plugin.corpus.format import CorpusMeta

data, run, logs, seconds, asked = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
meta = CorpusMeta.load(data)
load = " ".join(f"{x:.1f}" for x in os.getloadavg())
print(f"PageSum demo: {meta.view} locality, {meta.tokenizer} vocabulary of {meta.vocab_size}, "
      f"{seconds // 60} min {seconds % 60} s end to end on {os.cpu_count()} cores (load average now {load})")
print("\nData (pagesum-preprocess, meta.json)")
print(f"  {'split':6} {'papers':>6} {'pages':>6} {'pages/paper':>11} {'source tokens kept':>18} {'skipped':>7}")
for split in meta.splits:
    s = meta.stats[split]
    print(f"  {split:6} {s['examples']:6d} {s['pages']:6d} {s['pages_per_example_mean']:11.2f} "
          f"{1 - s['share_source_tokens_lost']:18.1%} {s['skipped_total']:7d}")
print(f"  pages of at most {meta.max_page_tokens} tokens, summaries of at most {meta.max_summary_tokens}")

log = (logs / "train.log").read_text()
valid = re.findall(r"epoch (\d+) \| valid on 'valid' subset \| loss ([\d.]+) \| nll_loss ([\d.]+).*?num_updates (\d+)", log)
ran = max((int(n) for n in re.findall(r"num_updates[ =](\d+)", log)), default=0)
print(f"\nTraining curve (fairseq-train, {ran} of {asked} updates; validation loss per epoch, base 2)")
for epoch, loss, nll, updates in valid:
    print(f"  epoch {int(epoch):2d}  updates {int(updates):4d}  loss {float(loss):6.3f}  nll {float(nll):6.3f}")
if ran < asked:
    print(f"  WARNING: training stopped after {ran} of {asked} updates: the model is undertrained, and the "
          f"scores below say little about what {asked} updates give")

print("\nROUGE F1 on the 25 test abstracts (pagesum-score, 95% bootstrap interval)")
print(f"  {'system':8} {'R-1':>18} {'R-2':>18} {'R-Lsum':>18}")
for name in ("model", "lead3"):
    scores = json.loads((run / f"scores.{name}.json").read_text())["scores"]
    cells = [f"{scores[m]['f']:5.2f} [{scores[m]['ci_low']:5.2f},{scores[m]['ci_high']:5.2f}]"
             for m in ("rouge1", "rouge2", "rougeLsum")]
    print(f"  {'PageSum' if name == 'model' else 'Lead-3':8} " + " ".join(f"{c:>18}" for c in cells))

# ROUGE alone can flatter a model that ignores its input: say how source-specific it is.
# Page weights against each paper's own page count: uniform over 5 pages is 0.2, over 8 pages 0.125.
hyps = (run / "test.hyp.txt").read_text().splitlines()
weights = [json.loads(line)["page_weights"] for line in (run / "test.page_weights.jsonl").read_text().splitlines()]
top = [mean(max(row) for row in rows) for rows in weights]  # per paper: its mean top weight over the steps
uniform = [1 / len(rows[0]) for rows in weights]  # per paper: 1 / its number of pages
focused = sum(t > 2 * u for t, u in zip(top, uniform))
print(f"\n  distinct model summaries: {len(set(hyps))} of {len(hyps)}")
print(f"  mean top page weight while decoding: {mean(top):.3f}, against {mean(uniform):.3f} if uniform over each "
      f"paper's own pages ({min(map(len, (r[0] for r in weights)))}-{max(map(len, (r[0] for r in weights)))} pages); "
      f"{focused} of {len(top)} papers put more than twice the uniform weight on their top page")

print("\nOutputs")
for what, path in (("summaries", "test.hyp.txt"), ("Lead-3", "test.lead3.txt"), ("page weights", "test.page_weights.jsonl"),
                   ("page-importance plot", "page_importance.png"), ("checkpoint", "checkpoints/checkpoint_best.pt")):
    print(f"  {what:21} {run / path}")
print(f"  {'full logs':21} {logs}/ (setup, preprocess, train, generate, baseline, score, plot)")
EOF
cat "$RUN/report.txt"
