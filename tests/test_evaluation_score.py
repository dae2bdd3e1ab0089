"""``pagesum-score``: scores, intervals, significance, Perl ROUGE and bad inputs."""

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from builders.corpora import acl_papers
from pagesum_plugin.evaluation import perl_rouge, rouge
from pagesum_plugin.evaluation.extractive import lead, oracle
from pagesum_plugin.evaluation.score import main
from pagesum_plugin.evaluation.significance import approximate_randomization, bootstrap_ci
from pagesum_plugin.corpus.sentences import split_sentences


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def systems(tmp_path_factory):
    """References (abstracts) and two real systems of different quality: Oracle and Lead-3."""
    root = tmp_path_factory.mktemp("systems")
    papers = acl_papers(12, offset=20)
    refs = [" ".join(p["summary"].split()) for p in papers]
    sentences = [[s for sec in p["sections"] for s in split_sentences(sec["text"])] for p in papers]
    oracles = [" ".join(oracle(sents, ref)) for sents, ref in zip(sentences, refs)]
    leads = [" ".join(lead(sents, 3)) for sents in sentences]
    return {
        "ref": _write(root / "ref.txt", refs),
        "oracle": _write(root / "oracle.txt", oracles),
        "lead": _write(root / "lead.txt", leads),
        "refs": refs,
        "oracles": oracles,
    }


def _score_json(capsys, *args):
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_report_has_corpus_rouge_with_a_bootstrap_interval_around_it(systems, capsys):
    report = _score_json(capsys, "--hyp", systems["oracle"], "--ref", systems["ref"])
    expected = rouge.corpus_rouge(systems["oracles"], systems["refs"])
    assert report["examples"] == 12 and report["empty_hypotheses"] == 0
    for metric in rouge.METRICS:
        score = report["scores"][metric]
        assert score["f"] == pytest.approx(expected[metric], abs=1e-9)
        assert score["ci_low"] < score["f"] < score["ci_high"]


def test_workers_is_the_number_of_processes_that_score_the_examples(systems, capsys, monkeypatch):
    asked, score_examples = [], rouge.score_examples

    def recording(hypotheses, references, workers=None, **kwargs):
        asked.append(workers)
        return score_examples(hypotheses, references, workers=workers, **kwargs)

    monkeypatch.setattr(rouge, "score_examples", recording)
    one = _score_json(capsys, "--hyp", systems["oracle"], "--ref", systems["ref"], "--workers", "1")
    two = _score_json(capsys, "--hyp", systems["oracle"], "--ref", systems["ref"], "--workers", "2")
    assert asked == [1, 2] and one["scores"] == two["scores"]


def test_help_states_lowercasing_and_sentence_splitting(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "lowercased" in text and "split_sentences" in text and "--sentence-split" in text


def test_a_better_system_is_significantly_better_on_every_metric(systems, capsys):
    report = _score_json(capsys, "--hyp", systems["oracle"], "--ref", systems["ref"], "--compare", systems["lead"])
    p_values = report["compare"]["p_values"]
    assert set(p_values) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    assert all(p < 0.01 for p in p_values.values()), p_values
    assert all(d > 0 for d in report["compare"]["difference"].values())


def test_a_system_compared_with_a_copy_of_itself_is_not_significantly_different(systems, capsys):
    same = _score_json(capsys, "--hyp", systems["lead"], "--ref", systems["ref"], "--compare", systems["lead"])
    assert all(p == 1.0 for p in same["compare"]["p_values"].values())


def test_several_references_are_accepted(systems, capsys):
    report = _score_json(capsys, "--hyp", systems["lead"], "--ref", systems["ref"], "--ref", systems["oracle"])
    single = _score_json(capsys, "--hyp", systems["lead"], "--ref", systems["ref"])
    for metric in rouge.METRICS:  # the best of two references is never worse than one
        assert report["scores"][metric]["f"] >= single["scores"][metric]["f"]


def test_different_line_counts_are_an_error_naming_both_files(systems, tmp_path, capsys):
    short = _write(tmp_path / "short.txt", ["only one line"])
    assert main(["--hyp", short, "--ref", systems["ref"]]) == 2
    err = capsys.readouterr().err
    assert "short.txt: 1 lines" in err and "ref.txt: 12 lines" in err


def test_a_missing_file_is_an_error_naming_it(systems, tmp_path, capsys):
    assert main(["--hyp", str(tmp_path / "nope.txt"), "--ref", systems["ref"]]) == 2
    assert "nope.txt: no such file" in capsys.readouterr().err


def test_invalid_utf8_is_an_error_naming_file_and_line(systems, tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n" * 5 + b"caf\xe9\n" + b"fine\n" * 6)
    assert main(["--hyp", str(bad), "--ref", systems["ref"]]) == 2
    assert "bad.txt:6: not valid UTF-8" in capsys.readouterr().err


def test_empty_hypotheses_are_counted_and_scored_as_zero(systems, tmp_path, capsys):
    lines = open(systems["lead"], encoding="utf-8").read().splitlines()
    lines[3] = lines[7] = ""
    holes = _write(tmp_path / "holes.txt", lines)
    report = _score_json(capsys, "--hyp", holes, "--ref", systems["ref"])
    full = _score_json(capsys, "--hyp", systems["lead"], "--ref", systems["ref"])
    assert report["examples"] == 12 and report["empty_hypotheses"] == 2
    assert report["scores"]["rouge1"]["f"] < full["scores"]["rouge1"]["f"]


def test_approximate_randomization_matches_the_exact_permutation_p_value():
    # 5 examples, all favouring A equally: only the 2 all-same-sign flips of 32 are as extreme.
    p = approximate_randomization(np.ones(5), np.zeros(5), trials=20000, seed=3)
    assert p == pytest.approx(2 / 32, abs=0.006)


def test_bootstrap_interval_of_a_constant_is_that_constant():
    assert bootstrap_ci(np.full(30, 0.4)) == pytest.approx((0.4, 0.4))


def test_bootstrap_interval_of_spread_out_scores_is_a_narrow_interval_around_their_mean():
    low, high = bootstrap_ci(np.arange(100) / 100)
    assert low < 0.495 < high and high - low < 0.2


def _perl_ready():
    try:
        perl_rouge.check_perl_dependencies()
        return True
    except perl_rouge.PerlRougeUnavailable:
        return False


@pytest.mark.skipif(not _perl_ready(), reason="perl with XML::Parser (libxml-parser-perl) is not installed")
def test_perl_rouge_agrees_with_the_default_scorer(systems, capsys):
    perl = _score_json(capsys, "--hyp", systems["oracle"], "--ref", systems["ref"], "--perl")
    ours = _score_json(capsys, "--hyp", systems["oracle"], "--ref", systems["ref"])
    assert perl["scorer"].startswith("ROUGE-1.5.5 -c 95 -r 1000 -n 2 -m")
    for metric in perl_rouge._PERL_NAMES.values():  # the script's ROUGE-L is summary-level
        assert perl["scores"][metric]["f"] == pytest.approx(ours["scores"][metric]["f"], abs=1.0)
        assert perl["scores"][metric]["ci_low"] <= perl["scores"][metric]["f"] <= perl["scores"][metric]["ci_high"]


@pytest.mark.skipif(not _perl_ready(), reason="perl with XML::Parser (libxml-parser-perl) is not installed")
def test_perl_rouge_report_says_it_has_no_sentence_level_rouge_l(systems, capsys):
    assert main(["--hyp", systems["oracle"], "--ref", systems["ref"], "--perl"]) == 0
    report = capsys.readouterr().out
    assert "ROUGE-Lsum (summary-level)" in report
    assert re.search(r"ROUGE-L \(sentence-level\)\s+-\s+not computed by this scorer", report)


def test_the_report_names_each_rouge_l_by_its_level(systems, capsys):
    assert main(["--hyp", systems["oracle"], "--ref", systems["ref"]]) == 0
    rows = {line.split("  ")[0]: line for line in capsys.readouterr().out.splitlines()}
    assert {"ROUGE-1", "ROUGE-2", "ROUGE-L (sentence-level)", "ROUGE-Lsum (summary-level)"} <= set(rows)


def test_missing_xml_parser_gives_the_package_to_install(tmp_path, monkeypatch):
    # A perl that cannot load XML::Parser, first on PATH.
    fake = tmp_path / "perl"
    fake.write_text("#!/bin/sh\necho \"Can't locate XML/Parser.pm in @INC\" >&2\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert shutil.which("perl") == str(fake)
    assert subprocess.run(["perl", "-e", "1"]).returncode == 2
    with pytest.raises(perl_rouge.PerlRougeUnavailable, match="libxml-parser-perl"):
        perl_rouge.check_perl_dependencies()


def _per_example(hyp_path, ref_path):
    """Per-example F1 of each metric, scored as ``run()`` scores them."""
    hyps = [rouge.prepare(h) for h in open(hyp_path, encoding="utf-8").read().splitlines()]
    refs = [[rouge.prepare(r)] for r in open(ref_path, encoding="utf-8").read().splitlines()]
    return rouge.score_examples(hyps, refs, workers=1)


def test_the_interval_is_the_bootstrap_of_the_requested_samples_and_seed(systems, capsys):
    report = _score_json(capsys, "--hyp", systems["lead"], "--ref", systems["ref"], "--bootstrap", "7", "--seed", "5")
    for metric, scores in _per_example(systems["lead"], systems["ref"]).items():
        low, high = bootstrap_ci(scores, samples=7, seed=5)
        assert (report["scores"][metric]["ci_low"], report["scores"][metric]["ci_high"]) == (100 * low, 100 * high)


def test_every_p_value_counts_the_requested_number_of_trials(systems, capsys):
    """No random sign flip is as extreme as Oracle against Lead-3: p = 1 / (trials + 1)."""
    report = _score_json(capsys, "--hyp", systems["oracle"], "--ref", systems["ref"], "--compare", systems["lead"],
                         "--trials", "9")
    assert report["compare"]["trials"] == 9
    assert report["compare"]["p_values"] == {metric: 1 / 10 for metric in rouge.METRICS}


def test_without_sentence_splitting_only_rouge_lsum_changes(systems, capsys):
    """Each line is then one sentence: summary-level ROUGE-L becomes the sentence-level one."""
    punkt = _score_json(capsys, "--hyp", systems["lead"], "--ref", systems["ref"])
    none = _score_json(capsys, "--hyp", systems["lead"], "--ref", systems["ref"], "--sentence-split", "none")
    assert (punkt["sentence_split"], none["sentence_split"]) == ("punkt", "none")
    for metric in ("rouge1", "rouge2", "rougeL"):
        assert none["scores"][metric] == punkt["scores"][metric]
    assert none["scores"]["rougeLsum"]["f"] != pytest.approx(punkt["scores"]["rougeLsum"]["f"], abs=0.01)
    assert none["scores"]["rougeLsum"]["f"] == pytest.approx(none["scores"]["rougeL"]["f"], abs=1e-9)
