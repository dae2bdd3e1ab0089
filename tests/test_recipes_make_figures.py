"""``pagesum-make-figures``: the README's figures from the aclsum papers, each with its numbers
beside it; a figure whose input is not given is skipped, saying which flag it needs."""

import json
import shutil

import numpy as np
import pytest

from builders.bert import write_tiny_nsp_bert
from pagesum_plugin.corpus.sentences import split_sentences
from pagesum_plugin.evaluation import analysis
from pagesum_plugin.evaluation.data import iter_documents
from pagesum_recipes import make_figures

PAPERS = 3  # of the package's 250: enough for every figure, and quick


@pytest.fixture
def paper_dir(tmp_path, monkeypatch):
    """The first papers of the package, and a stand-in for the sentence-embedding model."""
    folder = tmp_path / "paper_jsons"
    folder.mkdir()
    for path in sorted(make_figures.PAPER_DIR.glob("*.json"))[:PAPERS]:
        shutil.copy(path, folder)
    monkeypatch.setattr(make_figures, "PAPER_DIR", folder)

    def encode(sentences):  # (n, 64): hashed bags of words, enough to draw the curve
        vectors = np.zeros((len(sentences), 64))
        for row, sentence in enumerate(sentences):
            for word in sentence.lower().split():
                vectors[row, sum(map(ord, word)) % 64] += 1.0
        return vectors
    monkeypatch.setattr(analysis, "minilm_encoder", lambda device="cpu": encode)
    return folder


def numbers(out_dir, name):
    assert (out_dir / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return json.loads((out_dir / f"{name}.json").read_text())


def test_the_figures_that_need_nothing_else_are_drawn_and_the_others_skipped_naming_their_flag(paper_dir, tmp_path,
                                                                                               capsys):
    out_dir = tmp_path / "figures"
    assert make_figures.main(["--out-dir", str(out_dir), "--papers", "2"]) == 0
    printed = capsys.readouterr().out
    assert numbers(out_dir, "locality")["documents"] == 2  # --papers
    assert numbers(out_dir, "dependencies")["documents"] == PAPERS
    assert "skipped page_importance.png: give --page-weights" in printed
    assert "skipped coherence.png: give --nsp-model" in printed
    assert sorted(p.name for p in out_dir.iterdir()) == ["dependencies.json", "dependencies.png", "locality.json",
                                                         "locality.png"]


def test_the_page_importance_figure_shows_the_example_named_by_id(paper_dir, tmp_path):
    weights = tmp_path / "test.page_weights.jsonl"
    rows = [{"id": 0, "hypothesis": "a", "tokens": ["a"], "page_weights": [[1.0, 0.0]]},
            {"id": 5, "hypothesis": "b c", "tokens": ["b", " c"], "page_weights": [[0.2, 0.8], [0.6, 0.4]]}]
    weights.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out_dir = tmp_path / "figures"
    assert make_figures.main(["--out-dir", str(out_dir), "--papers", "1", "--page-weights", str(weights),
                              "--id", "5"]) == 0
    shown = numbers(out_dir, "page_importance")
    assert shown["steps"] == 2 and shown["top_page_per_step"] == [2, 1]


def test_the_coherence_figure_scores_the_abstracts_with_the_model_given(paper_dir, tmp_path):
    abstracts = [document.summary for document in iter_documents(str(paper_dir), None, "aclsum")]
    (tmp_path / "bert").mkdir()
    bert = write_tiny_nsp_bert(tmp_path / "bert", abstracts)
    out_dir = tmp_path / "figures"
    assert make_figures.main(["--out-dir", str(out_dir), "--papers", "1", "--nsp-model", bert]) == 0
    expected = analysis.semantic_coherence([split_sentences(a) for a in abstracts], analysis.NextSentenceScorer(bert))
    scored = numbers(out_dir, "coherence")
    assert scored["scored"] == expected.scored == PAPERS
    assert scored["scores"] == pytest.approx(expected.scores)
