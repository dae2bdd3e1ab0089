"""``pagesum-baseline``: Lead-k and greedy Oracle on real papers, from jsonl and paged data."""

import contextlib
import io
from types import SimpleNamespace

import pytest
from rouge_score import rouge_scorer

from builders.corpora import write_cohan, write_jsonl
from pagesum_plugin.evaluation import rouge
from pagesum_plugin.evaluation.baselines import main
from pagesum_plugin.evaluation.extractive import oracle
from pagesum_plugin.evaluation.data import iter_documents
from pagesum_plugin.corpus.sentences import split_sentences


PAPERS = (6, 40)  # the conftest fixtures papers, jsonl and paged read them


def _read(path):
    return open(path, encoding="utf-8").read().splitlines()


def _r1_plus_r2(summary, reference, scorer=rouge_scorer.RougeScorer(["rouge1", "rouge2"], use_stemmer=True)):
    scores = scorer.score(reference, summary)
    return scores["rouge1"].fmeasure + scores["rouge2"].fmeasure


def test_lead_k_writes_the_first_k_sentences_of_each_document(jsonl, papers, tmp_path, capsys):
    out = tmp_path / "lead.txt"
    assert main(["--input", jsonl, "--method", "lead", "--k", "2", "--out", str(out)]) == 0
    assert "wrote 6 lead summaries" in capsys.readouterr().out
    for line, paper in zip(_read(out), papers):
        first = [s for sec in paper["sections"] for s in split_sentences(sec["text"])][:2]
        assert line == " ".join(first)


def test_oracle_beats_lead_by_more_than_ten_rouge_1_points(jsonl, tmp_path):
    out, refs = tmp_path / "oracle.txt", tmp_path / "ref.txt"
    assert main(["--input", jsonl, "--method", "oracle", "--out", str(out), "--ref-out", str(refs)]) == 0
    lead_out = tmp_path / "lead.txt"
    assert main(["--input", jsonl, "--method", "lead", "--out", str(lead_out)]) == 0
    oracle_r1 = rouge.corpus_rouge(_read(out), _read(refs))["rouge1"]
    lead_r1 = rouge.corpus_rouge(_read(lead_out), _read(refs))["rouge1"]
    assert oracle_r1 > lead_r1 + 10


def test_oracle_stops_at_the_requested_number_of_sentences(jsonl, tmp_path):
    out = tmp_path / "oracle1.txt"
    assert main(["--input", jsonl, "--method", "oracle", "--max-sentences", "1", "--out", str(out)]) == 0
    for line, doc in zip(_read(out), iter_documents(jsonl), strict=True):
        picked = oracle(doc.sentences, doc.summary, max_sentences=1)
        assert len(picked) == 1 and line == " ".join(picked[0].split())


def test_oracle_starts_from_the_best_single_sentence(jsonl, papers):
    # Greedy step 1 is the best single sentence: check it by brute force on one paper.
    sentences = next(iter_documents(jsonl)).sentences
    reference = papers[0]["summary"]
    best_single = max(sentences, key=lambda s: _r1_plus_r2(s, reference))
    assert best_single in oracle(sentences, reference)


def test_oracle_stops_when_no_sentence_adds_rouge():
    sentences = ["Completely unrelated words here.", "PageSum reads pages.", "PageSum reads pages."]
    # A second copy of the matching sentence would only lower precision.
    assert oracle(sentences, "PageSum reads pages.") == ["PageSum reads pages."]
    assert oracle(["a b c", "d e f"], "x y z") == []


@pytest.fixture(scope="module")
def paged_lead(paged, tmp_path_factory):
    """Lead-3 on the paged test split, run once: its exit status, what it printed, and the
    summary and reference files it wrote."""
    root = tmp_path_factory.mktemp("paged_lead")
    out, refs, printed = root / "lead.txt", root / "ref.txt", io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = main(["--input", paged, "--split", "test", "--method", "lead", "--k", "3", "--out", str(out),
                       "--ref-out", str(refs)])
    return SimpleNamespace(status=status, printed=printed.getvalue(), out=out, refs=refs)


def test_baselines_read_paged_data_and_keep_every_example(paged_lead, paged, papers):
    assert paged_lead.status == 0
    assert "wrote 6 lead summaries" in paged_lead.printed
    assert _read(paged_lead.refs) == [" ".join(p["summary"].split()) for p in papers]
    for line, doc in zip(_read(paged_lead.out), iter_documents(paged, "test")):
        assert line == " ".join(doc.sentences[:3])


def test_lead_k_on_paged_data_takes_the_document_sentences_as_on_jsonl(paged_lead, papers, tmp_path):
    # Lead-k takes the document's sentences, not the pages' "Section name:" headed text.
    jsonl_lead = tmp_path / "jsonl_lead.txt"
    assert main(["--input", str(write_jsonl(tmp_path / "test.jsonl", papers)), "--method", "lead", "--k", "3",
                 "--out", str(jsonl_lead)]) == 0
    assert _read(paged_lead.out) == _read(jsonl_lead)


def test_oracle_on_paged_data_beats_lead_k(paged_lead, paged, tmp_path):
    oracle_out = tmp_path / "oracle.txt"
    assert main(["--input", paged, "--split", "test", "--method", "oracle", "--out", str(oracle_out)]) == 0
    scores = rouge.corpus_rouge(_read(oracle_out), _read(paged_lead.refs))
    assert scores["rouge1"] > rouge.corpus_rouge(_read(paged_lead.out), _read(paged_lead.refs))["rouge1"]


def test_a_paged_directory_without_split_is_a_clear_error(paged, tmp_path, capsys):
    assert main(["--input", paged, "--method", "lead", "--out", str(tmp_path / "x.txt")]) == 2
    assert "give the split to read" in capsys.readouterr().err


def test_a_bad_jsonl_line_is_reported_with_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "summary": "s", "text": "Fine text."}\n{"id": "b", "summary": "s"}\n')
    assert main(["--input", str(bad), "--method", "lead", "--out", str(tmp_path / "x.txt")]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl, line 2" in err


def test_the_input_format_names_the_reader_of_the_input_file(papers, tmp_path):
    arxiv, jsonl_lead, arxiv_lead = tmp_path / "test.arxiv.jsonl", tmp_path / "jsonl.txt", tmp_path / "arxiv.txt"
    write_cohan(arxiv, papers)
    assert main(["--input", str(arxiv), "--input-format", "arxiv", "--method", "lead", "--out", str(arxiv_lead),
                 "--ref-out", str(tmp_path / "arxiv_ref.txt")]) == 0
    assert main(["--input", str(write_jsonl(tmp_path / "test.jsonl", papers)), "--method", "lead",
                 "--out", str(jsonl_lead), "--ref-out", str(tmp_path / "jsonl_ref.txt")]) == 0
    assert _read(arxiv_lead) == _read(jsonl_lead)
    assert _read(tmp_path / "arxiv_ref.txt") == _read(tmp_path / "jsonl_ref.txt")
