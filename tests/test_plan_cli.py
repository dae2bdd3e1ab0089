"""``pagesum-plan``: for every system and batch size, the longest input that the memory model
fits into the budget, with the cheapest settings that fit it."""

import re
from dataclasses import replace

import pytest

from pagesum_plugin.architectures import SYSTEMS, architecture
from pagesum_plugin.memory.model import GB, Step, predict
from pagesum_plugin.memory.plan import SETTINGS, best_fit, main, parse_bytes, step_for


def plan(capsys, *argv):
    """Runs pagesum-plan on a 12 GB card at PageSum-large's size; returns its first line and its rows (cells:
    system, batch, input, tokens, settings, peak) by (system, batch), in the order printed."""
    assert main(["--budget", "12GB", "--arch", "pagesum_bart_large", *argv]) == 0
    first, _, *lines = capsys.readouterr().out.splitlines()
    rows = [re.split(r"\s{2,}", line) for line in lines]
    return first, {(row[0], int(row[1])): row for row in rows}


def pages(row) -> int:
    return int(row[2].split()[0])


def test_the_arch_sets_the_size_of_every_system(capsys):
    large_line, large = plan(capsys)
    base_line, base = plan(capsys, "--arch", "pagesum_bart_base")  # the last --arch given wins
    assert "(12 + 12 layers, d=1024)" in large_line and "(6 + 6 layers, d=768)" in base_line
    assert all(pages(base[key]) > pages(large[key]) for key in (("pagesum", 8), ("bart", 8)))


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


def test_pages_are_counted_in_page_tokens_and_the_longest_input_stays_within_the_budget(capsys):
    _, pages_of_1024 = plan(capsys, "--batches", "1", "--systems", "pagesum", "hed")
    _, pages_of_512 = plan(capsys, "--batches", "1", "--systems", "pagesum", "hed", "--page-tokens", "512")
    assert pages_of_1024["pagesum", 1][2] == "64 x 1024 (the cap)"
    pagesum = pages_of_512["pagesum", 1]
    assert re.fullmatch(r"\d+ x 512", pagesum[2]) and pages(pagesum) > 64  # not capped: more, shorter pages
    assert pagesum[3] == f"{pages(pagesum) * 512:,}" and float(pagesum[5]) <= 12.0
    assert pages_of_512["hed", 1][2] == "128 x 512 (the cap)"  # 65,536 tokens in pages of 512
    _, one_more = plan(capsys, "--batches", "1", "--systems", "pagesum", "--page-tokens", "512",
                       "--pages", str(pages(pagesum) + 1))
    assert "does not fit" in one_more["pagesum", 1][4]


def test_keeping_the_decoders_score_matrices_fits_fewer_pages_than_the_fused_kernel(capsys):
    fused_first, fused = plan(capsys, "--batches", "1", "--systems", "pagesum", "hed")
    bmm_first, bmm = plan(capsys, "--batches", "1", "--systems", "pagesum", "hed", "--decoder-attention", "bmm")
    assert fused_first.endswith("decoder attention fused:") and bmm_first.endswith("decoder attention bmm:")
    for system in ("pagesum", "hed"):
        assert fused[system, 1][2] == "64 x 1024 (the cap)"
        assert re.fullmatch(r"\d+ x 1024", bmm[system, 1][2]) and pages(bmm[system, 1]) < 64
        assert float(bmm[system, 1][5]) <= 12.0


def test_a_shorter_summary_fits_more_pages_when_the_decoders_scores_are_kept(capsys):
    long_first, long = plan(capsys, "--batches", "1", "--systems", "pagesum", "--decoder-attention", "bmm",
                            "--summary-tokens", "1024")
    short_first, short = plan(capsys, "--batches", "1", "--systems", "pagesum", "--decoder-attention", "bmm",
                              "--summary-tokens", "256")
    assert "1024-token summaries" in long_first and "256-token summaries" in short_first
    assert pages(long["pagesum", 1]) < 64 and short["pagesum", 1][2] == "64 x 1024 (the cap)"


def test_max_tokens_caps_the_input_at_the_whole_pages_or_1024_token_units_within_it(capsys):
    _, rows = plan(capsys, "--batches", "1", "--systems", "pagesum", "bart", "--max-tokens", "8192")
    assert rows["pagesum", 1][2:4] == ["8 x 1024 (the cap)", "8,192"]
    assert rows["bart", 1][2:4] == ["8192 (the cap)", "8,192"]
    _, rows = plan(capsys, "--batches", "1", "--systems", "pagesum", "bart", "--max-tokens", "5000")
    assert rows["pagesum", 1][2] == "4 x 1024 (the cap)" and rows["bart", 1][2] == "4096 (the cap)"


def test_only_the_systems_and_batch_sizes_asked_for_are_planned_in_the_order_given(capsys):
    _, rows = plan(capsys, "--systems", "hed", "pagesum", "--batches", "2", "1")
    assert list(rows) == [("hed", 2), ("hed", 1), ("pagesum", 2), ("pagesum", 1)]
    for system in ("hed", "pagesum"):  # two inputs a step: fewer pages each
        assert pages(rows[system, 2]) < pages(rows[system, 1])
