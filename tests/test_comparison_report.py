"""The report stage (``comparison/report.py``) on stage files written by hand: what each cell
reads, how significance is marked, and what happens to a system that does not fit."""

import json

import pytest

from pagesum_recipes.comparison.report import ReportError, build_record, main, markdown, write_report

METRICS = ("rouge1", "rouge2", "rougeL", "rougeLsum")
SETUP = {"device": "CPU", "budget_mb": 100.0, "unit": 1024, "batch_size": 1, "model_size": "tiny", "dry_run": False}


def write_system(out, key, name, tokens, peak_mb=None, scores=None, p_values=None, difference=None, speed=None):
    (out / key).mkdir(parents=True)
    probes = [{"tokens": 1024, "peak_mb": peak_mb if tokens else 250.0, "fits": bool(tokens)}]
    (out / key / "fit.json").write_text(json.dumps({**SETUP, "system": key, "name": name, "tokens": tokens,
                                                    "peak_mb": peak_mb, "train_tokens_per_second": 1000.0 if tokens else None,
                                                    "probes": probes}))
    if not tokens:
        return
    (out / key / "scores.json").write_text(scores_report(scores, p_values, difference))
    (out / key / "generate.log").write_text(f"INFO:fairseq_cli.generate:Translated 3 sentences (90 tokens) in 1.5s "
                                            f"({speed} sentences/s, 60.00 tokens/s)\n")


def scores_report(scores, p_values=None, difference=None) -> str:
    """A system's scores.json, as the score stage writes it (with ``p_values``: tested against the reference)."""
    report = {"examples": 3, "empty_hypotheses": 0,
              "scores": {m: {"f": scores, "ci_low": scores - 1, "ci_high": scores + 1} for m in METRICS}}
    if p_values is not None:
        report["compare"] = {"p_values": {m: p_values for m in METRICS}, "difference": {m: difference for m in METRICS}}
    return json.dumps(report)


@pytest.fixture
def stages(tmp_path):
    out, data = tmp_path / "out", tmp_path / "data"
    data.mkdir()
    (data / "meta.json").write_text(json.dumps({"dataset": "govreport", "stats": {"test": {"examples": 3}}}))
    write_system(out, "pagesum_spatial", "PageSum (spatial)", 3072, 80.0, scores=40.0, speed=2.0)
    write_system(out, "hepos_lsh", "HEPOS (LSH)", 2048, 95.5, scores=35.0, p_values=0.001, difference=-5.0, speed=1.25)
    write_system(out, "bart", "BART (1,024)", 1024, 60.0, scores=39.0, p_values=0.4, difference=-1.0, speed=3.0)
    write_system(out, "hed", "HED", None)
    return out, data


def test_every_cell_reads_the_stage_files(stages):
    out, data = stages
    rows = {r["system"]: r for r in build_record(out, data, ["pagesum_spatial", "hepos_lsh", "bart"],
                                                 "pagesum_spatial", 0.05)["rows"]}
    lsh = rows["hepos_lsh"]
    assert (lsh["tokens"], lsh["peak_mb"], lsh["decoding"]["per_second"]) == (2048, 95.5, 1.25)
    assert lsh["rouge"]["rouge2"] == {"f": 35.0, "ci_low": 34.0, "ci_high": 36.0, "p_value": 0.001, "mark": "↓"}
    assert rows["pagesum_spatial"]["rouge"]["rouge1"]["p_value"] is None


def test_only_a_significant_difference_is_marked(stages):
    out, data = stages
    table = markdown(build_record(out, data, ["pagesum_spatial", "hepos_lsh", "bart"], "pagesum_spatial", 0.05))
    assert "| HEPOS (LSH) | 2,048 | 95.5 | 1,000 | 1.25 | 35.00↓ (34.00–36.00) |" in table
    assert "| BART (1,024) | 1,024 | 60.0 | 1,000 | 3.00 | 39.00 (38.00–40.00) |" in table


def test_a_system_that_does_not_fit_is_a_row_that_says_so(stages):
    out, data = stages
    record = build_record(out, data, ["pagesum_spatial", "hed"], "pagesum_spatial", 0.05)
    assert "| HED | does not fit: 1,024 tokens need 250.0 MB |" in markdown(record)
    summary = write_report(out, record)
    assert "HED | does not fit" in summary and (out / "tokens_vs_memory.png").exists()
    assert not list(out.glob("*.partial*")), "every output is moved into place"


def test_a_missing_stage_output_is_an_error_naming_the_stage(stages):
    out, data = stages
    (out / "bart" / "scores.json").unlink()
    with pytest.raises(ReportError, match=r"bart/scores.json not found: run the score stage"):
        build_record(out, data, ["pagesum_spatial", "bart"], "pagesum_spatial", 0.05)


def test_the_command_marks_at_the_significance_and_against_the_reference_it_is_given(stages):
    out, data = stages
    command = [str(out), "--data", str(data), "--systems", "pagesum_spatial", "hepos_lsh", "bart"]

    def report(*flags) -> dict:
        assert main([*command, *flags]) == 0
        record = json.loads((out / "report.json").read_text())
        return record["setup"], {row["system"]: row["rouge"]["rouge1"] for row in record["rows"]}

    setup, rouge1 = report("--reference", "pagesum_spatial", "--significance", "0.5")
    assert setup["significance"] == 0.5 and rouge1["bart"]["mark"] == "↓"  # p = 0.4: unmarked at 0.05
    # PageSum's scores as the score stage writes them against HEPOS
    (out / "pagesum_spatial" / "scores.json").write_text(scores_report(40.0, p_values=0.001, difference=5.0))
    setup, rouge1 = report("--reference", "hepos_lsh")
    assert setup["reference_name"] == "HEPOS (LSH)" and rouge1["hepos_lsh"]["p_value"] is None
    assert rouge1["pagesum_spatial"]["mark"] == "↑"
