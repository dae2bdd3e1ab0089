"""What a row group is: the unit of the scale benchmark that one call runs, estimates, stores
and renders. ``registry.py`` lists them; each row's module defines its groups."""

import argparse
from dataclasses import dataclass, field
from typing import Callable, Dict, List

import torch

from benchmarks.common import ModelSize
from benchmarks.scale.costs import Cost
from benchmarks.scale.hardware import Peaks
from benchmarks.scale.oom import OomLedger


@dataclass
class Context:
    """Where a group runs."""

    device: torch.device
    dtype: torch.dtype
    size: ModelSize  # bart.large on CUDA, pagesum_tiny's dimensions on the CPU
    peaks: Peaks
    ledger: OomLedger = field(default_factory=OomLedger)

    @property
    def element(self) -> int:
        return torch.finfo(self.dtype).bits // 8


@dataclass(frozen=True)
class Group:
    """A part of a row that finishes in one call: its settings (JSON: they are stored with its
    results), how to measure it (records, one per configuration) and what it costs."""

    id: str  # "4:900"
    row: str  # "4"
    title: str
    settings: Dict
    measure: Callable[[Dict, Context], List[Dict]]
    cost: Callable[[Dict, ModelSize, int], Cost]  # (settings, model size, bytes per element)


@dataclass(frozen=True)
class Row:
    """A table of the report: its groups, made from the command line, and how it renders the
    records of its groups' latest runs (``runs``: run id -> run record)."""

    id: str
    title: str
    groups: Callable[[argparse.Namespace], List[Group]]
    render: Callable[[List[Dict], Dict[str, Dict]], List[str]]
