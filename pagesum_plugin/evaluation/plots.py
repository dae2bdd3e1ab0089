"""``pagesum-plot``: the paper's analysis figures as PNG files.

    pagesum-plot page-importance --weights test.page_weights.jsonl --id ID --out fig3.png
    pagesum-plot locality     --input test.jsonl --out fig1.png
    pagesum-plot dependencies --input DATA --split test --out fig4.png
    pagesum-plot coherence    --model bert-large-uncased/ --hyp test.hypo --out coherence.png

Every command also prints the numbers behind its figure (``--json`` for scripts).
"""

import itertools
import json
import sys
from typing import Dict, List, Optional, Sequence

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from pagesum_plugin.evaluation import analysis  # noqa: E402
from pagesum_plugin.evaluation.arguments import plot_parser  # noqa: E402
from pagesum_plugin.evaluation.data import iter_documents, read_lines  # noqa: E402
from pagesum_plugin.corpus.errors import InputError  # noqa: E402
from pagesum_plugin.atomic import atomic_path  # noqa: E402
from pagesum_plugin.corpus.sentences import split_sentences  # noqa: E402

# --------------------------------------------------------------------------- figures


# Page importance: one row per decoding step, labelled with its token while they fit; the
# figure's height is capped, so a long summary squeezes its rows instead of making a poster.
STEP_ROW_INCHES = 0.12  # a 7-point token label per row
MAX_LABELLED_STEPS = 60
MAX_HEIGHT_INCHES = 8.0


def page_importance_size(steps: int, pages: int) -> tuple:
    """The figure size (inches) of a steps x pages page-importance heatmap."""
    width = min(12.0, max(3.0, 0.5 * pages + 2))
    height = min(MAX_HEIGHT_INCHES, max(3.0, STEP_ROW_INCHES * min(steps, MAX_LABELLED_STEPS) + 1.5))
    return width, height


def plot_page_importance(matrix, tokens: Optional[Sequence[str]], out: str, title: str = "") -> Dict:
    """Heatmap of a (steps, pages) page-weight matrix: darker = more important page (Fig. 3).
    The colour scale runs from 0 to the matrix's largest weight (a model's weights rarely
    reach 1, and a 0-1 scale would show them all pale); the colour bar marks what uniform
    weights over the pages would be."""
    matrix = analysis.check_page_weights(matrix)
    steps, pages = matrix.shape
    fig, ax = plt.subplots(figsize=page_importance_size(steps, pages))
    top = float(matrix.max())
    image = ax.imshow(matrix, cmap="Blues", vmin=0.0, vmax=top, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(pages), [str(p + 1) for p in range(pages)])
    ax.set_xlabel("Page ID")
    ax.set_ylabel("Decoding step")
    if tokens is not None and steps <= MAX_LABELLED_STEPS:
        ax.set_yticks(range(steps), list(tokens), fontsize=7)
    uniform = 1.0 / pages
    bar = fig.colorbar(image, ax=ax, label=f"Weight (red line: uniform, 1/{pages})")
    bar.ax.axhline(min(uniform, top), color="red", linewidth=1.5)
    ax.set_title(title or "Page importance at each decoding step")
    _save(fig, out)
    return {
        "steps": steps,
        "pages": pages,
        "mean_weight_per_page": matrix.mean(axis=0).tolist(),
        "top_page_per_step": (matrix.argmax(axis=1) + 1).tolist(),
        "colour_scale": [0.0, top],
        "uniform_weight": uniform,
    }


def plot_locality(curve: analysis.LocalityCurve, out: str) -> Dict:
    """Mean similarity against sentence distance, with the overall mean dashed (Fig. 1)."""
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(curve.distances, curve.mean_similarity, marker="o", markersize=2.5, label="pairs at that distance")
    ax.axhline(curve.overall_mean, linestyle="--", color="gray", label="all sentence pairs")
    ax.set_xlabel("Sentence distance")
    ax.set_ylabel("Mean cosine similarity")
    ax.set_title(f"Spatial locality ({curve.documents} documents)")
    ax.legend()
    _save(fig, out)
    return {
        "documents": curve.documents,
        "overall_mean": curve.overall_mean,
        "distances": curve.distances.tolist(),
        "mean_similarity": curve.mean_similarity.tolist(),
        "pair_counts": curve.pair_counts.tolist(),
    }


def plot_distance_histogram(distances: Sequence[float], out: str, bins: int = 10, documents: int = 0) -> Dict:
    """Histogram of normalized distances of interdependent sentence pairs (Fig. 4)."""
    counts, edges = analysis.distance_histogram(distances, bins)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge", edgecolor="white")
    ax.set_xlabel("Sentence distance / number of sentences in the document")
    ax.set_ylabel("Interdependent pairs")
    ax.set_title(f"Long-distance dependencies ({len(distances)} pairs)")
    _save(fig, out)
    return {"pairs": len(distances), "documents": documents, "bin_edges": edges.tolist(), "counts": counts.tolist()}


def plot_coherence(result: analysis.CoherenceResult, out: str) -> Dict:
    """Histogram of per-summary semantic coherence (Eq. 11), with the mean dashed."""
    scored = [s for s in result.scores if s is not None]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.hist(scored, bins=20, range=(0.0, 1.0), edgecolor="white")
    ax.axvline(result.mean, linestyle="--", color="gray", label=f"mean {result.mean:.3f}")
    ax.set_xlabel("Semantic coherence SC(S)")
    ax.set_ylabel("Summaries")
    ax.legend()
    _save(fig, out)
    return {"mean": result.mean, "scored": result.scored, "too_short": result.too_short, "scores": result.scores}


def _save(fig, out: str) -> None:
    fig.tight_layout()
    with atomic_path(out) as partial:
        fig.savefig(partial, dpi=150)
    plt.close(fig)


# --------------------------------------------------------------------------- commands


def _documents(args) -> List:
    docs = iter_documents(args.input, args.split, args.input_format)
    return list(itertools.islice(docs, args.max_docs))  # islice(..., None) reads them all


def cmd_page_importance(args) -> Dict:
    tokens, matrix = analysis.read_page_weights(args.weights, args.id)
    return plot_page_importance(matrix, tokens, args.out, title=f"Page importance, example {args.id}")


def cmd_locality(args) -> Dict:
    docs = _documents(args)
    encode = analysis.minilm_encoder(args.device)
    sentences = [d.sentences[: args.max_sentences] if args.max_sentences else d.sentences for d in docs]
    curve = analysis.locality_curve(sentences, encode, args.max_distance)
    numbers = plot_locality(curve, args.out)
    numbers["skipped_short_documents"] = len(docs) - curve.documents
    return numbers


def cmd_dependencies(args) -> Dict:
    docs = _documents(args)
    distances = []
    for doc in docs:
        pairs = analysis.interdependent_pairs(doc.sentences, split_sentences(doc.summary), args.t1, args.t2)
        distances.extend(p.normalized_distance for p in pairs)
    return plot_distance_histogram(distances, args.out, args.bins, documents=len(docs))


def cmd_coherence(args) -> Dict:
    if args.hyp:
        texts = read_lines(args.hyp)
    elif args.input:
        texts = [d.summary for d in _documents(args)]
    else:
        raise ValueError("coherence needs --hyp FILE (summaries, one per line) or --input (reference summaries)")
    scorer = analysis.NextSentenceScorer(args.model, args.device)
    result = analysis.semantic_coherence([split_sentences(t) for t in texts], scorer)
    return plot_coherence(result, args.out)


COMMANDS = {"page-importance": cmd_page_importance, "locality": cmd_locality, "dependencies": cmd_dependencies,
            "coherence": cmd_coherence}  # the subcommands of plot_parser()


def run(args) -> Dict:
    """One subcommand, its arguments parsed by ``plot_parser()``: the numbers behind its figure."""
    return COMMANDS[args.command](args)


def main(argv=None) -> int:
    args = plot_parser().parse_args(argv)
    if getattr(args, "input", "") is None and args.command in ("locality", "dependencies"):
        print(f"pagesum-plot {args.command}: error: --input is required", file=sys.stderr)
        return 2
    try:
        numbers = run(args)
    except (InputError, ValueError, OSError, RuntimeError) as err:  # bad input: one clear line
        print(f"pagesum-plot {args.command}: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(numbers))
    else:
        summary = {k: v for k, v in numbers.items() if not isinstance(v, list)}
        print(f"pagesum-plot {args.command}: wrote {args.out} {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
