"""Every row of the scale benchmark, in report order, and the selection of row groups.

A new row (the decoding and training work as it lands: a cache written once, fused attention
in decoding, the fused optimizer) is a module with three functions per group, how to make its
groups from the options, how to measure one (records) and what it costs (``costs.Cost``),
plus one renderer for its table, and one ``Row`` here. Its groups are then selectable with
``--rows``, estimated before they start, stored in the results file and rendered by
``--report`` like the others."""

import argparse
from typing import List, Optional, Sequence

from benchmarks.scale import decoding, production, pruning, training
from benchmarks.scale.group import Group, Row

ROWS = (
    Row("1", "training peak memory", training.memory_groups, training.render_memory),
    Row("2", "training peak memory growth", training.growth_groups, training.render_growth),
    Row("3", "training throughput", training.throughput_groups, training.render_throughput),
    Row("4", "decoding throughput", decoding.throughput_groups, decoding.render_throughput),
    Row("5", "page pruning", pruning.pruning_groups, pruning.render_pruning),
    Row("6", "production decoding", production.production_groups, production.render_production),
)


def all_groups(args: argparse.Namespace) -> List[Group]:
    return [group for row in ROWS for group in row.groups(args)]


def select(groups: List[Group], specs: Optional[Sequence[str]]) -> List[Group]:
    """The groups that ``specs`` name, in report order: a row ("4": all its groups) or one
    group ("4:900"); None: every group. An unknown name raises ValueError with the choices."""
    if not specs:
        return list(groups)
    known = {group.id for group in groups} | {group.row for group in groups}
    unknown = [spec for spec in specs if spec not in known]
    if unknown:
        raise ValueError(f"--rows: no row or group {', '.join(unknown)}; the choices are rows "
                         f"{' '.join(sorted({g.row for g in groups}))} and groups {' '.join(g.id for g in groups)}")
    return [group for group in groups if group.id in specs or group.row in specs]
