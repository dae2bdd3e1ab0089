"""``pagesum-plan``: for every system and batch size, the longest input that the memory model
fits into the budget, with the cheapest settings that fit it."""

from dataclasses import replace

import pytest

from pagesum_plugin.memory.model import GB, SYSTEMS, Step, architecture, predict
from pagesum_plugin.memory.plan import SETTINGS, best_fit, main, parse_bytes, step_for


def test_budget_amounts_parse_in_decimal_and_binary_units():
    assert parse_bytes("24GB") == 24e9 and parse_bytes("24 GiB") == 24 * 2**30 and parse_bytes("512MB") == 512e6


def test_the_issues_command_prints_every_system_and_batch(capsys):
    assert main(["--budget", "24GB", "--arch", "pagesum_bart_large", "--summary-tokens", "1024"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines[2:]]
    assert [(row[0], row[1]) for row in rows] == [(s, str(b)) for s in SYSTEMS for b in (1, 2, 4, 8)]
    pagesum = rows[0]
    assert pagesum[2:5] == ["64", "x", "1024"]  # PageSum-large, batch 1, fused attention


@pytest.mark.parametrize("system", [s for s in SYSTEMS if s != "awesome"])
def test_the_longest_input_fits_and_one_more_unit_fits_no_setting(system):
    _, arch = architecture("pagesum_bart_large")
    base = Step(system, arch, 1, 1024, 512, batch=2)
    units, chosen = best_fit(system, base, 16 * GB, 1024, cap=200)
    assert 0 < units < 200 and predict(chosen).peak <= 16 * GB
    for dtype, checkpointing, optimizer, masters in SETTINGS:
        longer = step_for(system, replace(base, dtype=dtype, checkpointing=checkpointing, optimizer=optimizer,
                                          master_weights=masters), units + 1, 1024)
        assert predict(longer).peak > 16 * GB


def test_awesome_fits_any_length_once_one_segment_fits():
    """AWESOME's graph holds one segment (and one replayed memory write) whatever the length."""
    _, arch = architecture("awesome_bart_large")
    units, chosen = best_fit("awesome", Step("awesome", arch, 1, 1024, 256), 16 * GB, 1024, cap=200)
    assert units == 200 and predict(chosen).peak <= 16 * GB


def test_the_cheapest_settings_are_chosen_when_several_fit():
    _, arch = architecture("pagesum_bart_large")
    units, chosen = best_fit("pagesum", Step("pagesum", arch, 1, 1024, 256), 80 * GB, 1024, cap=4)
    assert units == 4 and (chosen.dtype, chosen.checkpointing, chosen.optimizer) == ("bf16", False, "adamw_torch")


def test_a_bad_budget_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit):
        main(["--budget", "lots", "--arch", "pagesum_bart_large"])
    assert "'lots': expected an amount such as 24GB" in capsys.readouterr().err


def test_an_unknown_architecture_is_a_one_line_error(capsys):
    assert main(["--budget", "24GB", "--arch", "pagesum_bart_huge"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
