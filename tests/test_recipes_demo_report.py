"""The demo's report (recipes/demo_report.py): its verdict says plainly when the model did not learn
(identical summaries, uniform page weights) and not when it did, it prints two samples next to their
references, and it marks the checkpoint that was decoded."""

import json
from pathlib import Path

import pytest

from pagesum_recipes import demo_report

DEMO = Path(__file__).resolve().parents[1] / "recipes" / "demo.sh"


def uniform(pages, steps=4):
    return [[1 / pages] * pages for _ in range(steps)]


def focused(pages, top, steps=4):
    """Weights that put `top` on page 1 and share the rest evenly."""
    rest = (1 - top) / (pages - 1)
    return [[top] + [rest] * (pages - 1) for _ in range(steps)]


DISTINCT = [f"summary of paper {i}" for i in range(25)]
IDENTICAL = ["in this paper we propose a novel method"] * 25


def test_identical_summaries_and_uniform_weights_are_both_reported():
    stats = demo_report.page_weight_stats([uniform(5)] * 12 + [uniform(8)] * 13)
    assert stats.top_over_uniform == pytest.approx(1.0)
    assert stats.mean_entropy == pytest.approx(1.0)
    lines = demo_report.verdict_lines(IDENTICAL, stats)
    assert lines[0] == "Verdict: THE MODEL DID NOT LEARN to read its papers:"
    text = "\n".join(lines)
    assert "25 of 25 summaries are shared with another paper (1 distinct)" in text
    assert "page weights are uniform" in text and "threshold is 1.5 times" in text


def test_distinct_summaries_with_focused_weights_pass():
    stats = demo_report.page_weight_stats([focused(5, 0.6)] * 25)
    assert stats.top_over_uniform == pytest.approx(3.0)
    assert stats.focused == 25 and stats.top_page_counts == [25, 0, 0, 0, 0]
    assert demo_report.verdict(DISTINCT, stats) == []
    assert demo_report.verdict_lines(DISTINCT, stats)[0].startswith("Verdict: the model learned to read its papers: 25 of 25")


def test_each_failure_is_reported_on_its_own():
    good_weights = demo_report.page_weight_stats([focused(4, 0.7)] * 25)
    flat_weights = demo_report.page_weight_stats([focused(4, 0.3)] * 25)  # 1.2 times uniform
    assert [r.split(":")[0] for r in demo_report.verdict(DISTINCT, flat_weights)] == ["page weights are uniform"]
    # 6 papers share one summary: 19 of 25 (76%) have their own, under the 80% threshold
    mostly = DISTINCT[:19] + ["a generic abstract"] * 6
    assert len(demo_report.verdict(mostly, good_weights)) == 1
    assert "6 of 25 summaries are shared" in demo_report.verdict(mostly, good_weights)[0]
    # 4 sharing: 21 of 25 (84%) pass
    assert demo_report.verdict(DISTINCT[:21] + ["a generic abstract"] * 4, good_weights) == []


def test_two_samples_are_printed_next_to_their_references():
    ids = ["P1", "P2", "P3"]
    lines = demo_report.sample_lines(ids, [("model", ["model one", "model two", "model three"]),
                                           ("reference", ["abstract one", "abstract two", "abstract three"])])
    assert lines == ["  paper P1", "    model:     model one", "    reference: abstract one",
                     "  paper P2", "    model:     model two", "    reference: abstract two"]


def test_a_long_sample_wraps_under_its_label():
    lines = demo_report.sample_lines(["P1"], [("model", ["word " * 60]), ("reference", ["x"])], k=1, width=60)
    assert lines[1].startswith("    model:     word") and all(line.startswith("    " + " " * 11) for line in lines[2:-1])


TRAIN_LOG = """\
epoch 001 | valid on 'valid' subset | loss 9.5 | nll_loss 9.4 | ppl 1 | wps 1 | wpb 1 | bsz 1 | num_updates 25
epoch 002 | valid on 'valid' subset | loss 8.1 | nll_loss 8.0 | ppl 1 | wps 1 | wpb 1 | bsz 1 | num_updates 50 | best_loss 8.1
epoch 003 | valid on 'valid' subset | loss 8.3 | nll_loss 8.2 | ppl 1 | wps 1 | wpb 1 | bsz 1 | num_updates 75 | best_loss 8.1
"""


def test_the_training_curve_marks_the_decoded_checkpoint():
    lines = demo_report.training_lines(TRAIN_LOG, 75)
    assert lines[0].startswith("Training curve (fairseq-train, 75 of 75 updates")
    assert [line.endswith("checkpoint_best.pt, the one decoded") for line in lines[1:]] == [False, True, False]


def test_stopping_early_by_patience_is_said_and_is_no_warning():
    log = TRAIN_LOG + "early stop since valid performance hasn't improved for last 1 runs\n"
    lines = demo_report.training_lines(log, 500)
    assert "stopped early after 75 updates" in lines[-1] and not any("WARNING" in line for line in lines)
    assert "WARNING" in demo_report.training_lines(TRAIN_LOG, 500)[-1]


def test_the_demo_decodes_the_best_checkpoint_and_prints_this_report():
    text = DEMO.read_text()
    assert "checkpoints/checkpoint_best.pt" in text and "pagesum-demo-report" in text


def write_run(tmp_path, summaries, weights):
    """A demo run's test outputs and its data folder's ids and references."""
    run, data = tmp_path / "run", tmp_path / "data"
    run.mkdir()
    data.mkdir()
    (run / "test.hyp.txt").write_text("".join(s + "\n" for s in summaries))
    (run / "test.page_weights.jsonl").write_text("".join(
        json.dumps({"id": i, "tokens": ["t"] * len(w), "page_weights": w}) + "\n" for i, w in enumerate(weights)))
    (data / "test.ids.txt").write_text("".join(f"P{i}\n" for i in range(len(summaries))))
    (data / "test.reference.txt").write_text("".join(f"the abstract of paper {i}\n" for i in range(len(summaries))))
    return run, data


def test_a_run_that_wrote_one_summary_for_every_paper_is_said_not_to_have_learned(tmp_path):
    run, data = write_run(tmp_path, IDENTICAL, [uniform(7)] * 25)
    text = "\n".join(demo_report.reading_lines(run, data))
    assert "distinct model summaries: 1 of 25" in text and "THE MODEL DID NOT LEARN" in text
    assert "Samples (the first 2 test papers)" in text
    assert text.count("    model:     in this paper we propose a novel method") == 2
    assert "    reference: the abstract of paper 0" in text and "    reference: the abstract of paper 1" in text
    assert "paper P2" not in text


def test_a_run_with_its_own_summaries_and_focused_weights_passes(tmp_path):
    run, data = write_run(tmp_path, DISTINCT, [focused(6, 0.5)] * 25)
    text = "\n".join(demo_report.reading_lines(run, data))
    assert "distinct model summaries: 25 of 25" in text and "Verdict: the model learned" in text
    assert "DID NOT LEARN" not in text


def test_the_samples_stand_next_to_the_abstracts_when_given(tmp_path):
    run, data = write_run(tmp_path, DISTINCT, [focused(6, 0.5)] * 25)
    abstracts = tmp_path / "test.abstract.txt"
    abstracts.write_text("word " * 200 + "\n" + "".join(f"the whole abstract of paper {i}\n" for i in range(1, 25)))
    lines = demo_report.reading_lines(run, data, abstracts)
    second = lines.index("  paper P1")
    assert lines[second:second + 4] == ["  paper P1", "    model:     summary of paper 1",
                                        "    reference: the abstract of paper 1", "    abstract:  the whole abstract of paper 1"]
    first = lines[lines.index("  paper P0") + 3:second]  # a long abstract is shortened, at a word boundary
    assert first[0].startswith("    abstract:  word") and first[-1].endswith("word ...")
    assert len(" ".join(first).split()) < 70


def test_the_copying_stage_is_summed_up_in_one_line():
    log = ("epoch 001 | loss 3.1 | num_updates 120\n"
           "epoch 009 | valid on 'valid' subset | loss 0.105 | nll_loss 0.105 | ppl 1.08 | num_updates 1000\n")
    assert demo_report.copy_lines(log) == [
        "Copying stage (fairseq-train on the copying corpus): 1000 updates, validation loss 0.105 "
        "(base 2; 0 = copies every token)"]
