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


def longest_within(measure: Callable[[int], M], budget_bytes: float, unit: int, max_units: int) -> Fit[M]:
    """The longest length in ``unit, 2 * unit, ..., max_units * unit`` whose measured peak is at
    most ``budget_bytes``, in at most 1 + 2 * ceil(log2(max_units)) measurements."""
    if unit < 1 or max_units < 1:
        raise ValueError(f"need a unit and a maximum of at least 1, got unit {unit}, max_units {max_units}")
    fit: Fit[M] = Fit(tokens=None, measurement=None, budget_bytes=budget_bytes)
    results = {}

    def fits(units: int) -> bool:
        results[units] = measure(units * unit)
        fit.probes.append((units * unit, results[units]))
        return fit.fits(results[units])

    if not fits(1):
        return fit
    low, high = 1, max_units + 1  # low fits; high (max_units + 1: beyond the range) does not
    while low < max_units:  # double while it fits
        longer = min(2 * low, max_units)
        if not fits(longer):
            high = longer
            break
        low = longer
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    fit.tokens, fit.measurement = low * unit, results[low]
    return fit
