"""Running out of GPU memory is a result, not a crash: a measurement that does not fit is
recorded as OOM (any CUDA allocation failure, ``pagesum_recipes.profiling.is_out_of_memory``),
and a system that ran out of memory is not tried again on anything at least as large."""

import sys
from collections import defaultdict
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar

import torch

from benchmarks.common import device_nearly_full, free_memory, is_out_of_memory

T = TypeVar("T")
Point = Tuple[int, ...]  # a configuration's sizes, each of which only adds memory as it grows


def unless_oom(measure: Callable[[], T], device: torch.device) -> Optional[T]:
    """``measure()``, or None when the device could not allocate what it needed, the error
    (on CUDA: what was asked, what was free, what torch held) written to stderr on one line; the
    memory is released either way. Any other error propagates."""
    try:
        return measure()
    except RuntimeError as error:
        if not is_out_of_memory(error, device_nearly_full(device)):
            raise
        print(f"out of memory: {' '.join(str(error).split())[:1000]}", file=sys.stderr, flush=True)
        return None
    finally:
        free_memory(device)


class OomLedger:
    """Where each system ran out of memory. A configuration is skipped when a recorded OOM of
    the same system was at most as large in every size (``Point``), so every system stops at its
    first OOM, also across row groups run by separate processes (``from_records``)."""

    def __init__(self):
        self.points: Dict[Tuple[str, str], List[Point]] = defaultdict(list)

    @classmethod
    def from_records(cls, records: Iterable[dict]) -> "OomLedger":
        """The OOMs among earlier measurement records (``status == "oom"``)."""
        ledger = cls()
        for record in records:
            if record.get("status") == "oom":
                ledger.record(record["row"], record["system"], record["point"])
        return ledger

    def record(self, row: str, system: str, point: Sequence[int]) -> None:
        self.points[row, system].append(tuple(point))

    def stopped_at(self, row: str, system: str, point: Sequence[int]) -> Optional[Point]:
        """The recorded OOM that rules ``point`` out, or None if it is worth trying."""
        return next((oom for oom in self.points[row, system]
                     if len(oom) == len(point) and all(a <= b for a, b in zip(oom, point))), None)
