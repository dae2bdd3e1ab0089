"""The longest input that fits a memory budget, by bisection over input lengths.

Lengths are whole multiples of a unit (AWESOME's Table 14 counts in units of 1,024 tokens),
from one unit to ``max_units``. ``measure(tokens)`` runs whatever costs memory (the fit
stage: one training step, ``training_step.py``) and returns an object with ``peak_bytes``;
a length fits when that peak is at most the budget. Peak memory is assumed to grow with the
length, so the fitting lengths are a prefix of the range: one unit is tried first (if it does
not fit, nothing does), then the length doubles until one does not fit or the cap is reached,
then the gap is bisected. No length is tried that is more than twice the answer: a step far
beyond the budget could exhaust the machine rather than fail cleanly. Every probe is kept, and
``consistent`` says whether they agree with the assumption.

With ``start_units``, a prediction of the answer (the memory model's,
``pagesum_plugin.memory.model``), the search starts there instead: the prediction is measured,
then its neighbour on the side the measurement points to, and the gap is widened by doubling
steps away from the prediction until a probe lands on the other side, then bisected. A
prediction within a unit or two costs two or three measurements; a wrong one costs about
what the search from one unit costs. No length above the prediction is tried before the
prediction has been measured to fit.
"""

import math
from dataclasses import dataclass, field
from typing import Callable, Generic, List, Optional, Protocol, Tuple, TypeVar


class Measurement(Protocol):
    peak_bytes: float  # math.inf when the device ran out of memory


M = TypeVar("M", bound=Measurement)


@dataclass
class Fit(Generic[M]):
    tokens: Optional[int]  # the longest fitting length; None when not even one unit fits
    measurement: Optional[M]  # what the longest fitting length cost
    probes: List[Tuple[int, M]] = field(default_factory=list)  # (tokens, measurement), in the order tried
    budget_bytes: float = math.inf

    def fits(self, measurement: M) -> bool:
        return measurement.peak_bytes <= self.budget_bytes

    @property
    def consistent(self) -> bool:
        """Every fitting probe is shorter than every probe that did not fit."""
        fitting = [tokens for tokens, m in self.probes if self.fits(m)]
        failing = [tokens for tokens, m in self.probes if not self.fits(m)]
        return not fitting or not failing or max(fitting) < min(failing)


def longest_within(measure: Callable[[int], M], budget_bytes: float, unit: int, max_units: int,
                   start_units: Optional[int] = None) -> Fit[M]:
    """The longest length in ``unit, 2 * unit, ..., max_units * unit`` whose measured peak is at
    most ``budget_bytes``, in at most 1 + 2 * ceil(log2(max_units)) measurements from one unit,
    or fewer from a good ``start_units``."""
    if unit < 1 or max_units < 1:
        raise ValueError(f"need a unit and a maximum of at least 1, got unit {unit}, max_units {max_units}")
    fit: Fit[M] = Fit(tokens=None, measurement=None, budget_bytes=budget_bytes)
    results = {}

    def fits(units: int) -> bool:
        results[units] = measure(units * unit)
        fit.probes.append((units * unit, results[units]))
        return fit.fits(results[units])

    if start_units is None:
        if not fits(1):
            return fit
        low, high = gallop_up(fits, 1, max_units)
    else:
        start = min(max(start_units, 1), max_units)
        if fits(start):
            low, high = gallop_up(fits, start, max_units)
        else:
            low, high = gallop_down(fits, start)
            if low == 0:
                return fit
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    fit.tokens, fit.measurement = low * unit, results[low]
    return fit


def gallop_up(fits: Callable[[int], bool], low: int, max_units: int) -> Tuple[int, int]:
    """(fitting, failing) bounds from a fitting ``low``: steps of 1, 2, 4, ... up, never beyond
    twice the last fitting length; ``max_units + 1`` stands for beyond the range."""
    step = 1
    while low < max_units:
        longer = min(low + step, 2 * low, max_units)
        if not fits(longer):
            return low, longer
        low, step = longer, 2 * step
    return low, max_units + 1


def gallop_down(fits: Callable[[int], bool], high: int) -> Tuple[int, int]:
    """(fitting, failing) bounds from a failing ``high``: steps of 1, 2, 4, ... down; 0 when
    not even one unit fits."""
    step = 1
    while high > 1:
        shorter = max(high - step, 1)
        if fits(shorter):
            return shorter, high
        high, step = shorter, 2 * step
    return 0, 1
