"""Which row groups a scale call runs: ``--rows`` takes rows and groups, every group is a row's,
and the production row reads a dataset's decoding settings from the generation defaults."""

import re

import pytest

from benchmarks.scale import results
from benchmarks.scale.cli import main, parse_args
from benchmarks.scale.registry import ROWS
from pagesum_plugin.generation import defaults
from pagesum_plugin.generation.defaults import GenerationDefaults, for_dataset

GPU_GROUPS = ["1", "2", "3", "4:256", "4:900", "4:fused", "5:256", "5:900", "5:fidelity", "6:arxiv", "6:govreport"]


def ids(argv):
    return [group.id for group in parse_args(argv).groups]


def test_without_rows_every_group_of_every_row_runs_in_report_order():
    assert ids(["--device", "cuda"]) == GPU_GROUPS


def test_a_row_selects_all_its_groups():
    assert ids(["--device", "cuda", "--rows", "5"]) == ["5:256", "5:900", "5:fidelity"]


def test_a_group_selects_only_itself_and_the_order_is_the_reports():
    assert ids(["--device", "cuda", "--rows", "6:govreport", "4:900", "1"]) == ["1", "4:900", "6:govreport"]


def test_the_decoding_rows_have_one_group_per_summary_length_and_row_4_one_of_fused_steps_at_the_shortest():
    assert ids(["--device", "cuda", "--rows", "4", "--out-lens", "128", "512"]) == ["4:128", "4:512", "4:fused"]


def test_an_unknown_row_is_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--device", "cuda", "--rows", "7", "4:999"])
    error = capsys.readouterr().err
    assert "no row or group 7, 4:999" in error and "4:256 4:900" in error


def test_every_group_belongs_to_the_row_that_makes_it():
    args = parse_args(["--device", "cuda"])
    for row in ROWS:
        assert {group.row for group in row.groups(args)} == {row.id}


def test_the_production_row_decodes_with_the_datasets_generation_defaults():
    (group,) = parse_args(["--device", "cuda", "--rows", "6:govreport"]).groups
    production = for_dataset("govreport")
    settings = group.settings
    assert (settings["beam"], settings["lenpen"], settings["ngram"], settings["min_len"], settings["max_len"]) == (
        production.beam, production.lenpen, production.no_repeat_ngram_size, production.min_len, production.max_len_b)
    assert settings["ngram"] == 3, "trigram blocking"


def test_the_production_row_follows_a_change_of_the_defaults(monkeypatch):
    monkeypatch.setitem(defaults.DATASETS, "arxiv", GenerationDefaults(beam=5, lenpen=1.5, min_len=50, max_len_b=300))
    (group,) = parse_args(["--device", "cuda", "--rows", "6:arxiv"]).groups
    assert (group.settings["beam"], group.settings["lenpen"], group.settings["max_len"]) == (5, 1.5, 300)


def test_on_the_cpu_the_production_lengths_are_capped():
    (group,) = parse_args(["--device", "cpu", "--rows", "6:govreport"]).groups
    assert (group.settings["min_len"], group.settings["max_len"]) == (8, 8)


def test_a_group_whose_estimate_exceeds_the_time_left_is_recorded_as_skipped_not_run(tmp_path, capsys):
    path = str(tmp_path / "scale.jsonl")
    assert main(["--device", "cpu", "--rows", "1", "--time-left", "1", "--results", path]) == 0
    (record,) = results.read(path)
    assert (record["type"], record["group"], record["status"]) == ("run", "1", "skipped")
    assert re.fullmatch(r"estimated \d+ s, [01] s left", record["error"])
    assert "Estimate on an H100" in capsys.readouterr().out
