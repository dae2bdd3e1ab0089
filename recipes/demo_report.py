"""The demo's report (``recipes/demo.sh``): what ran, how the model scored against Lead-3, and
whether it learned to read its papers at all.

    pagesum-demo-report DATA RUN LOGS --seconds S --updates N --what WHAT_THE_SUMMARY_IS --abstracts FILE

ROUGE alone can flatter a model that ignores its input (a generic abstract shares much of its
wording with every real one), so the report also says how source-specific the model is, and
gives a verdict with stated thresholds:

* distinct summaries: the model did not learn if fewer than ``MIN_DISTINCT_SHARE`` of the test
  papers get a summary of their own (one no other paper gets);
* page weights: the model did not learn to weigh pages if the mean top page weight while
  decoding is below ``MIN_TOP_OVER_UNIFORM`` times what uniform weights over each paper's own
  pages give (1 / its number of pages).

Two sample summaries (the first two test papers, not chosen) are printed next to the summary
the model learned to write and the paper's abstract.
"""

import json
import math
import os
import re
import sys
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import List, Sequence, Tuple

from pagesum_plugin.corpus.format import CorpusMeta
from pagesum_recipes.arguments import demo_report_parser
from pagesum_recipes.console import UPDATES, VALID_LOSS

MIN_DISTINCT_SHARE = 0.8  # of the test papers, with a summary no other paper gets
MIN_TOP_OVER_UNIFORM = 1.5  # mean top page weight / uniform weight
SAMPLES = 2
ABSTRACT_CHARS = 300  # a sample's abstract is shortened to this, at a word boundary
VALID = re.compile(r"epoch (\d+) \| valid on 'valid' subset \| loss ([\d.]+) \| nll_loss ([\d.]+).*?num_updates (\d+)")
EARLY_STOP = re.compile(r"early stop since valid performance hasn't improved for last (\d+) runs")


@dataclass
class PageWeightStats:
    papers: int
    mean_top: float  # per paper its mean top weight over the decoding steps, averaged over papers
    mean_uniform: float  # per paper 1 / its number of pages, averaged over papers
    mean_entropy: float  # per paper its mean entropy over the steps / log(its pages): 1 = uniform
    focused: int  # papers whose mean top weight is over twice the uniform weight
    min_pages: int
    max_pages: int
    top_page_counts: List[int]  # per page position (1-based order): papers whose most-weighted page it is

    @property
    def top_over_uniform(self) -> float:
        return self.mean_top / self.mean_uniform


def page_weight_stats(weights: Sequence[Sequence[Sequence[float]]]) -> PageWeightStats:
    """Statistics of the page weights of several papers, each a (steps, pages) list of rows."""
    tops, uniforms, entropies, favourite = [], [], [], []
    for rows in weights:
        pages = len(rows[0])
        tops.append(mean(max(row) for row in rows))
        uniforms.append(1 / pages)
        entropy = mean(-sum(w * math.log(w) for w in row if w > 0) for row in rows)
        entropies.append(entropy / math.log(pages) if pages > 1 else 1.0)
        per_page = [mean(row[p] for row in rows) for p in range(pages)]
        favourite.append(per_page.index(max(per_page)))
    most = max(len(rows[0]) for rows in weights)
    return PageWeightStats(
        papers=len(weights), mean_top=mean(tops), mean_uniform=mean(uniforms), mean_entropy=mean(entropies),
        focused=sum(t > 2 * u for t, u in zip(tops, uniforms)), min_pages=min(len(r[0]) for r in weights),
        max_pages=most, top_page_counts=[favourite.count(p) for p in range(most)])


def own_summaries(summaries: Sequence[str]) -> int:
    """How many papers got a summary that no other paper got."""
    counts = Counter(summaries)
    return sum(counts[s] == 1 for s in summaries)


def verdict(summaries: Sequence[str], stats: PageWeightStats) -> List[str]:
    """Why the model did not learn, one reason a line; empty when it passed both thresholds."""
    reasons = []
    n = len(summaries)
    unique = own_summaries(summaries)
    if unique < MIN_DISTINCT_SHARE * n:
        reasons.append(f"{n - unique} of {n} summaries are shared with another paper ({len(set(summaries))} distinct); "
                       f"the threshold is {MIN_DISTINCT_SHARE:.0%} of the papers with a summary of their own")
    if stats.top_over_uniform < MIN_TOP_OVER_UNIFORM:
        reasons.append(f"page weights are uniform: the mean top page weight {stats.mean_top:.3f} is "
                       f"{stats.top_over_uniform:.2f} times the uniform {stats.mean_uniform:.3f}; the threshold is "
                       f"{MIN_TOP_OVER_UNIFORM} times")
    return reasons


def verdict_lines(summaries: Sequence[str], stats: PageWeightStats) -> List[str]:
    reasons = verdict(summaries, stats)
    if not reasons:
        return [f"Verdict: the model learned to read its papers: {own_summaries(summaries)} "
                f"of {len(summaries)} summaries are its own (threshold {MIN_DISTINCT_SHARE:.0%}), and its top page "
                f"gets {stats.top_over_uniform:.2f} times the uniform weight (threshold {MIN_TOP_OVER_UNIFORM})."]
    return ["Verdict: THE MODEL DID NOT LEARN to read its papers:"] + [f"  - {r}" for r in reasons]


def sample_lines(ids: Sequence[str], columns: Sequence[Tuple[str, Sequence[str]]], k: int = SAMPLES,
                 width: int = 100) -> List[str]:
    """The first k test papers' texts, one labelled block under the other: ``columns`` is
    (label, one text per paper) for the model's summaries, the references, the abstracts..."""
    indent = max(len(label) for label, _ in columns) + 2
    lines = []
    for i in range(min(k, len(ids))):
        lines.append(f"  paper {ids[i]}")
        for label, texts in columns:
            wrapped = textwrap.wrap(texts[i], width - 4 - indent) or [""]
            lines.append(f"    {label + ':':{indent}}{wrapped[0]}")
            lines.extend(f"    {'':{indent}}{more}" for more in wrapped[1:])
    return lines


def updates_ran(log: str) -> int:
    """The last update a fairseq-train log reports."""
    return max((int(n) for n in UPDATES.findall(log)), default=0)


def training_lines(log: str, asked: int) -> List[str]:
    valid = VALID.findall(log)
    ran = updates_ran(log)
    best = min(range(len(valid)), key=lambda i: float(valid[i][1])) if valid else None
    lines = [f"Training curve (fairseq-train, {ran} of {asked} updates; validation loss per epoch, base 2)"]
    for i, (epoch, loss, nll, updates) in enumerate(valid):
        mark = "  <- lowest: checkpoint_best.pt, the one decoded" if i == best else ""
        lines.append(f"  epoch {int(epoch):2d}  updates {int(updates):4d}  loss {float(loss):6.3f}  nll {float(nll):6.3f}{mark}")
    stop = EARLY_STOP.search(log)
    if stop:
        lines.append(f"  stopped early after {ran} updates: the validation loss had not improved for {stop.group(1)} "
                     f"epochs (--patience)")
    elif ran < asked:
        lines.append(f"  WARNING: training stopped after {ran} of {asked} updates: the model is undertrained, and the "
                     f"scores below say little about what {asked} updates give")
    return lines


def read_lines(path: Path) -> List[str]:
    return path.read_text(encoding="utf-8").splitlines()


def reading_lines(run: Path, data: Path, abstracts: Path = None) -> List[str]:
    """Whether the model reads its papers: distinct summaries, page-weight statistics, the
    verdict, and two samples next to their references (and abstracts, when given)."""
    summaries = read_lines(run / "test.hyp.txt")
    weights = [json.loads(line)["page_weights"] for line in read_lines(run / "test.page_weights.jsonl") if line.strip()]
    stats = page_weight_stats(weights)
    out = ["Does the model read its papers?",
           f"  distinct model summaries: {len(set(summaries))} of {len(summaries)}",
           f"  mean top page weight while decoding: {stats.mean_top:.3f}, against {stats.mean_uniform:.3f} if uniform "
           f"over each paper's own pages ({stats.min_pages}-{stats.max_pages} pages): {stats.top_over_uniform:.2f} times",
           f"  mean page-weight entropy: {stats.mean_entropy:.2f} of the uniform's (1.00 = uniform); "
           f"{stats.focused} of {stats.papers} papers put more than twice the uniform weight on their top page",
           "  papers whose most-weighted page is page 1, 2, ...: " + ", ".join(map(str, stats.top_page_counts))]
    out += [""] + verdict_lines(summaries, stats)
    columns = [("model", summaries), ("reference", read_lines(data / "test.reference.txt"))]
    if abstracts is not None:
        columns.append(("abstract", [textwrap.shorten(a, ABSTRACT_CHARS, placeholder=" ...") for a in read_lines(abstracts)]))
    out += ["", f"Samples (the first {SAMPLES} test papers)"] + sample_lines(read_lines(data / "test.ids.txt"), columns)
    return out


SYSTEMS = (("model", "PageSum"), ("lead3", "Lead-3"), ("target", "learned"))  # scores.NAME.json -> row label


def copy_lines(log: str) -> List[str]:
    """The copying stage in one line: its updates and final validation loss."""
    ran = updates_ran(log)
    valid = VALID_LOSS.findall(log)
    loss = f", validation loss {float(valid[-1]):.3f} (base 2; 0 = copies every token)" if valid else ""
    return [f"Copying stage (fairseq-train on the copying corpus): {ran} updates{loss}"]


def rouge_lines(run: Path, what: str) -> List[str]:
    out = [f"ROUGE F1 against the test papers' abstracts (pagesum-score, 95% bootstrap interval); "
           f"learned = {what}, the summaries the model was trained to write",
           f"  {'system':8} {'R-1':>18} {'R-2':>18} {'R-Lsum':>18}"]
    for name, label in SYSTEMS:
        scores = json.loads((run / f"scores.{name}.json").read_text())["scores"]
        cells = [f"{scores[m]['f']:5.2f} [{scores[m]['ci_low']:5.2f},{scores[m]['ci_high']:5.2f}]"
                 for m in ("rouge1", "rouge2", "rougeLsum")]
        out.append(f"  {label:8} " + " ".join(f"{c:>18}" for c in cells))
    return out


def report(data: Path, run: Path, logs: Path, seconds: int, asked: int, what: str, abstracts: Path) -> str:
    meta = CorpusMeta.load(data)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    out = [f"PageSum demo: {meta.view} locality, {meta.tokenizer} vocabulary of {meta.vocab_size}, "
           f"{seconds // 60} min {seconds % 60} s end to end on {os.cpu_count()} cores (load average now {load})"]
    out += ["", f"Data (pagesum-preprocess, meta.json); summary = {what}",
            f"  {'split':6} {'papers':>6} {'pages':>6} {'pages/paper':>11} {'source tokens kept':>18} {'skipped':>7}"]
    for split in meta.splits:
        s = meta.stats[split]
        out.append(f"  {split:6} {s['examples']:6d} {s['pages']:6d} {s['pages_per_example_mean']:11.2f} "
                   f"{1 - s['share_source_tokens_lost']:18.1%} {s['skipped_total']:7d}")
    out.append(f"  pages of at most {meta.max_page_tokens} tokens, summaries of at most {meta.max_summary_tokens}")

    out += [""] + copy_lines((logs / "train-copy.log").read_text(encoding="utf-8", errors="replace"))
    out += [""] + training_lines((logs / "train.log").read_text(encoding="utf-8", errors="replace"), asked)
    out += [""] + rouge_lines(run, what)
    out += [""] + reading_lines(run, data, abstracts)

    out += ["", "Outputs"]
    for label, path in (("summaries", "test.hyp.txt"), ("Lead-3", "test.lead3.txt"), ("page weights", "test.page_weights.jsonl"),
                        ("page-importance plot", "page_importance.png"), ("checkpoint", "checkpoints/checkpoint_best.pt")):
        out.append(f"  {label:21} {run / path}")
    out.append(f"  {'full logs':21} {logs}/ (split, preprocess, train-copy, train, generate, baseline, score, plot)")
    return "\n".join(out)


def main(argv=None) -> int:
    args = demo_report_parser().parse_args(argv)
    print(report(args.data, args.run, args.logs, args.seconds, args.updates, args.what, args.abstracts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
