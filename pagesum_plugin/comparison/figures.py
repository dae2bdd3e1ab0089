"""The comparison's figures: ROUGE against peak training memory, and tokens read against it.

Each system is one point, with its own color and marker in the legend (systems often share a
point at toy sizes); the budget is a dashed line. Files are written under a temporary name and
moved into place, so a failed run leaves no half-written figure.
"""

from pathlib import Path
from typing import Dict, Sequence

import matplotlib

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402

from ..corpus.format import replaced_when_written  # noqa: E402

METRIC_LABELS = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L", "rougeLsum": "ROUGE-Lsum"}
MARKERS = "osD^vP*Xh<>"


def rouge_against_memory(rows: Sequence[Dict], budget_mb: float, metrics: Sequence[str], out: Path) -> None:
    """One panel per metric: each system's F1 against its peak training memory (MB)."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.6 * len(metrics) + 2.2, 3.6), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for index, row in enumerate(rows):
            _point(ax, index, row["peak_mb"], row["rouge"][metric]["f"], row["name"])
        ax.axvline(budget_mb, linestyle="--", color="gray", label="budget")
        ax.set_xlabel("Peak training memory (MB)")
        ax.set_ylabel(f"{METRIC_LABELS[metric]} F1")
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7)
    fig.suptitle("ROUGE against peak training memory")
    _save(fig, out)


def tokens_against_memory(rows: Sequence[Dict], budget_mb: float, out: Path) -> None:
    """Tokens each system reads against the peak memory of its training step (MB)."""
    fig, ax = plt.subplots(figsize=(6.6, 3.8))
    for index, row in enumerate(rows):
        _point(ax, index, row["peak_mb"], row["tokens"], row["name"])
    ax.axvline(budget_mb, linestyle="--", color="gray", label="budget")
    ax.set_xlabel("Peak training memory (MB)")
    ax.set_ylabel("Input tokens read")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7)
    ax.set_title("Tokens read within the memory budget")
    _save(fig, out)


def _point(ax, index: int, x: float, y: float, label: str) -> None:
    ax.scatter([x], [y], s=30, marker=MARKERS[index % len(MARKERS)], color=f"C{index % 10}", label=label, alpha=0.8)


def _save(fig, out: Path) -> None:
    fig.tight_layout()
    with replaced_when_written(out) as partial:
        fig.savefig(partial, dpi=150)
    plt.close(fig)

