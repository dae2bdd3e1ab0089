"""The fit's bisection (``comparison/bisection.py``) against synthetic memory models whose answer
is known: no model, no device, just a function from input length to peak bytes."""

import math
from dataclasses import dataclass

import pytest

from pagesum_recipes.comparison.bisection import longest_within

UNIT, MAX_UNITS = 1024, 50


@dataclass(frozen=True)
class Peak:
    peak_bytes: float


class MemoryModel:
    """peak(tokens) = fixed + linear * tokens + quadratic * tokens^2, counting the lengths measured."""

    def __init__(self, fixed: float, linear: float = 0.0, quadratic: float = 0.0):
        self.fixed, self.linear, self.quadratic = fixed, linear, quadratic
        self.measured = []

    def peak(self, tokens: int) -> float:
        return self.fixed + self.linear * tokens + self.quadratic * tokens**2

    def __call__(self, tokens: int) -> Peak:
        self.measured.append(tokens)
        return Peak(self.peak(tokens))

    def longest_within(self, budget: float):
        """The answer by trying every length."""
        fitting = [k * UNIT for k in range(1, MAX_UNITS + 1) if self.peak(k * UNIT) <= budget]
        return max(fitting) if fitting else None


def test_a_linear_memory_model_reads_the_longest_input_the_budget_allows():
    model = MemoryModel(fixed=2e9, linear=1e6)  # 2 GB of weights, 1 MB per token
    fit = longest_within(model, budget_bytes=2e9 + 10_500 * 1e6, unit=UNIT, max_units=MAX_UNITS)
    assert fit.tokens == 10 * UNIT  # 10,240 tokens need 12.24 GB; 11,264 would need 13.26 GB
    assert fit.measurement.peak_bytes == model.peak(10 * UNIT)


@pytest.mark.parametrize("budget_gb", [2.5, 3, 4, 7.5, 12, 27, 40, 80])
def test_a_quadratic_memory_model_gets_the_answer_of_trying_every_length(budget_gb):
    model = MemoryModel(fixed=2e9, linear=2e5, quadratic=4.0)  # full attention: quadratic in the input
    fit = longest_within(model, budget_bytes=budget_gb * 2**30, unit=UNIT, max_units=MAX_UNITS)
    assert fit.tokens == model.longest_within(budget_gb * 2**30)


@pytest.mark.parametrize("budget_gb", [2.5, 3, 4, 7.5, 12, 27, 40, 80])
def test_the_search_measures_few_lengths_and_none_twice(budget_gb):
    model = MemoryModel(fixed=2e9, linear=2e5, quadratic=4.0)
    fit = longest_within(model, budget_bytes=budget_gb * 2**30, unit=UNIT, max_units=MAX_UNITS)
    assert len(model.measured) <= 1 + 2 * math.ceil(math.log2(MAX_UNITS))
    assert len(set(model.measured)) == len(model.measured)
    assert [tokens for tokens, _ in fit.probes] == model.measured


@pytest.mark.parametrize("budget_gb", [2.5, 3, 4, 7.5, 12, 27, 40, 80])
def test_no_length_tried_is_more_than_twice_the_answer(budget_gb):
    model = MemoryModel(fixed=2e9, linear=2e5, quadratic=4.0)  # a probe far past the budget could exhaust the machine
    fit = longest_within(model, budget_bytes=budget_gb * 2**30, unit=UNIT, max_units=MAX_UNITS)
    assert max(model.measured) <= 2 * fit.tokens


def test_nothing_fits_when_a_single_unit_exceeds_the_budget():
    model = MemoryModel(fixed=30e9)
    fit = longest_within(model, budget_bytes=27 * 2**30, unit=UNIT, max_units=MAX_UNITS)
    assert (fit.tokens, fit.measurement) == (None, None)
    assert model.measured == [UNIT], "after the shortest input fails, nothing longer is tried"


def test_memory_that_does_not_grow_with_the_input_reaches_the_cap_by_doubling():
    model = MemoryModel(fixed=14e9)  # AWESOME: segment after segment, flat memory
    fit = longest_within(model, budget_bytes=27 * 2**30, unit=UNIT, max_units=MAX_UNITS)
    assert fit.tokens == MAX_UNITS * UNIT
    assert model.measured == [k * UNIT for k in (1, 2, 4, 8, 16, 32, 50)]


def test_a_peak_equal_to_the_budget_fits():
    model = MemoryModel(fixed=0, linear=1.0)
    fit = longest_within(model, budget_bytes=7 * UNIT, unit=UNIT, max_units=MAX_UNITS)
    assert fit.tokens == 7 * UNIT


def test_a_single_unit_range_measures_one_length():
    model = MemoryModel(fixed=1e9)
    fit = longest_within(model, budget_bytes=2e9, unit=UNIT, max_units=1)
    assert (fit.tokens, model.measured) == (UNIT, [UNIT])


def test_running_out_of_device_memory_counts_as_not_fitting():
    def measure(tokens):
        return Peak(math.inf if tokens > 3 * UNIT else tokens)

    fit = longest_within(measure, budget_bytes=1e12, unit=UNIT, max_units=MAX_UNITS)
    assert fit.tokens == 3 * UNIT


def test_probes_that_contradict_memory_growing_with_the_input_are_flagged():
    peaks = {UNIT: 1.0, 2 * UNIT: 9.0, 3 * UNIT: 4.0}  # 3 units fit, but 2 did not

    fit = longest_within(lambda tokens: Peak(peaks.get(tokens, 10.0)), budget_bytes=5.0, unit=UNIT,
                         max_units=MAX_UNITS)
    assert fit.tokens == UNIT and fit.consistent, "3 units are never tried once 2 fail"
    fit.probes.append((3 * UNIT, Peak(4.0)))
    assert not fit.consistent


def test_a_unit_or_range_below_one_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        longest_within(MemoryModel(fixed=0), budget_bytes=1.0, unit=UNIT, max_units=0)


@pytest.mark.parametrize("budget_gb", [2.5, 3, 4, 7.5, 12, 27, 40, 80])
@pytest.mark.parametrize("start_units", [1, 5, 17, 50, 70])
def test_a_search_started_from_any_prediction_gets_the_same_answer(budget_gb, start_units):
    model = MemoryModel(fixed=2e9, linear=2e5, quadratic=4.0)
    fit = longest_within(model, budget_bytes=budget_gb * 2**30, unit=UNIT, max_units=MAX_UNITS,
                         start_units=start_units)
    assert fit.tokens == model.longest_within(budget_gb * 2**30)
    assert len(set(model.measured)) == len(model.measured) and fit.consistent


@pytest.mark.parametrize("budget_gb", [4, 7.5, 12, 27, 40])
@pytest.mark.parametrize("prediction_error", [-0.15, 0.0, 0.15])
def test_a_prediction_within_15_percent_of_the_peak_needs_fewer_training_steps(budget_gb, prediction_error):
    """The memory model's stated accuracy: a predicted peak off by 15% either way."""
    exact = MemoryModel(fixed=2e9, linear=2e5, quadratic=4.0)
    predicted = [k for k in range(1, MAX_UNITS + 1) if exact.peak(k * UNIT) * (1 + prediction_error) <= budget_gb * 2**30]
    from_one, from_prediction = (MemoryModel(fixed=2e9, linear=2e5, quadratic=4.0) for _ in range(2))
    longest_within(from_one, budget_gb * 2**30, UNIT, MAX_UNITS)
    longest_within(from_prediction, budget_gb * 2**30, UNIT, MAX_UNITS, start_units=max(predicted))
    assert len(from_prediction.measured) < len(from_one.measured)


def test_no_length_above_a_fitting_prediction_is_more_than_twice_a_measured_fit():
    model = MemoryModel(fixed=2e9, linear=1e6)
    longest_within(model, budget_bytes=1e15, unit=UNIT, max_units=MAX_UNITS, start_units=3)
    fitting = [3 * UNIT]
    for tokens in model.measured[1:]:
        assert tokens <= 2 * max(fitting)
        fitting.append(tokens)


def test_a_prediction_above_the_answer_walks_down_to_nothing_when_one_unit_does_not_fit():
    model = MemoryModel(fixed=2e9, linear=1e6)
    fit = longest_within(model, budget_bytes=1e9, unit=UNIT, max_units=MAX_UNITS, start_units=4)
    assert fit.tokens is None and model.measured[-1] == UNIT
