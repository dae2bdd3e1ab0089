"""How long a view takes to plan a whole split: the cost of choosing pages at load time.

    python -m benchmarks.view_building [--examples 200000] [--repeat 3]

Builds the structure of ``--examples`` synthetic arXiv-sized documents (200–300 sentences
of 20–40 tokens in 6–10 sections: about 7,500 tokens each) and times ``plan_pages`` for
each view over all of them, which is what the dataset does once when it loads a split.
The ``segments`` view is a loop over sentences, so it is timed on ``--segments-examples``.
"""

import argparse
import platform
import time

import numpy as np

from benchmarks.common import markdown_table
from pagesum_plugin.corpus.format import SplitStructure
from pagesum_plugin.corpus.views import ViewConfig, plan_pages

VIEWS = {
    "spatial 7 x 1024": ViewConfig("spatial", num_pages=7),
    "discourse <= 8 x 1024": ViewConfig("discourse", max_pages=8),
    "document <= 8 x 1024": ViewConfig("document", max_pages=8),
    "token 4 x 1024": ViewConfig("token", num_pages=4),
    "flat 10240": ViewConfig("flat", max_source_tokens=10240),
    "documents 4096": ViewConfig("documents", max_source_tokens=4096),
    "segments <= 768": ViewConfig("segments"),
}


def arxiv_like(examples: int, seed: int = 0) -> SplitStructure:
    rng = np.random.default_rng(seed)
    units = rng.integers(200, 301, examples)  # (examples,) sentences per document
    groups = rng.integers(6, 11, examples)  # (examples,) sections per document
    n_units = int(units.sum())
    unit_example = np.repeat(np.arange(examples), units)
    position = np.arange(n_units) - np.repeat(np.cumsum(units) - units, units)
    return SplitStructure(
        example_units=np.concatenate([[0], np.cumsum(units)]),
        example_groups=np.concatenate([[0], np.cumsum(groups)]),
        unit_length=rng.integers(20, 41, n_units),
        unit_group=position * groups[unit_example] // units[unit_example],  # contiguous sections
        head_spaced=np.ones(n_units, dtype=np.int64),
        head_plain=np.ones(n_units, dtype=np.int64),
        name_length=rng.integers(1, 6, int(groups.sum())),
    )


def best_seconds(structure: SplitStructure, config: ViewConfig, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        plan_pages(structure, config)
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=200_000)
    parser.add_argument("--segments-examples", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, "
          f"{platform.processor() or 'cpu'}; best of {args.repeat}")
    structures = {n: arxiv_like(n) for n in {args.examples, args.segments_examples}}
    rows = []
    for name, config in VIEWS.items():
        n = args.segments_examples if config.view == "segments" else args.examples
        seconds = best_seconds(structures[n], config, args.repeat)
        rows.append([name, f"{n:,}", f"{seconds:.2f}", f"{1e6 * seconds / n:.1f}", f"{n / seconds:,.0f}"])
    print(markdown_table(["view", "examples", "seconds", "µs per example", "examples/s"], rows))


if __name__ == "__main__":
    main()
