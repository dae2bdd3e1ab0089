"""``pagesum-plan``: for every system and batch size, the longest input that the memory model
fits into the budget, with the cheapest settings that fit it."""

from dataclasses import replace

import pytest

from pagesum_plugin.architectures import SYSTEMS, architecture
from pagesum_plugin.memory.model import GB, Step, predict
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


def test_a_budget_without_a_unit_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit):
        main(["--budget", "24", "--arch", "pagesum_bart_large"])
    assert "'24' has no unit: write 24GB" in capsys.readouterr().err


def test_the_cuda_context_comes_off_the_budget_and_is_in_the_predicted_peak(capsys):
    def pagesum_row(*extra):
        assert main(["--budget", "8GB", "--arch", "pagesum_bart_large", "--systems", "pagesum", "--batches", "1",
                     *extra]) == 0
        return capsys.readouterr().out.splitlines()[2].split()
    with_context, without = pagesum_row(), pagesum_row("--cuda-context", "0GB")
    assert int(with_context[2]) < int(without[2])  # fewer pages fit beside the context
    assert 7.0 < float(with_context[-1]) <= 8.0 and float(without[-1]) <= 8.0


def test_pages_ask_about_the_users_input_whether_it_fits_and_how_cheaply(capsys):
    assert main(["--budget", "12GB", "--arch", "pagesum_bart_large", "--systems", "pagesum", "--batches", "1",
                 "--pages", "20"]) == 0
    fits = capsys.readouterr().out.splitlines()[2]
    assert "20 x 1024" in fits and "checkpointing" in fits and "does not fit" not in fits
    assert main(["--budget", "12GB", "--arch", "pagesum_bart_large", "--systems", "pagesum", "--batches", "1",
                 "--pages", "200"]) == 0
    assert "does not fit: needs" in capsys.readouterr().out


def test_the_help_shows_two_examples(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert capsys.readouterr().out.count("  pagesum-plan --budget") == 2


def test_a_bad_budget_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit):
        main(["--budget", "lots", "--arch", "pagesum_bart_large"])
    assert "'lots': expected an amount such as 24GB" in capsys.readouterr().err


def test_an_unknown_architecture_is_a_one_line_error(capsys):
    assert main(["--budget", "24GB", "--arch", "pagesum_bart_huge"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
