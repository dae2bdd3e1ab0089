"""HED is trained, decoded and scored by the project's own commands, and summarizes from Python."""

import json
import os

import pytest
import torch

from builders.cli import USER_DIR, run_cli
from builders.corpora import acl_papers, write_multinews
from pagesum_plugin import from_pretrained

pytestmark = pytest.mark.slow  # end-to-end runs of fairseq-train and fairseq-generate

DOCUMENTS_VIEW = ["--view", "documents", "--max-source-tokens", "256"]
GEN = dict(beam=3, lenpen=1.0, min_len=4, max_len_b=12, no_repeat_ngram_size=3)


@pytest.fixture(scope="module")
def hed_run(tmp_path_factory):
    """Multi-News-format clusters (each paper's sections as its documents), preprocessed
    with sentencepiece, and an hed_tiny model trained for a few updates:
    (data_dir, save_dir, test clusters)."""
    root = tmp_path_factory.mktemp("hed_cli")
    papers = acl_papers(9)
    train = write_multinews(root, papers[:6], split="train")
    test = write_multinews(root, papers[6:], split="test")
    data = str(root / "data")
    run_cli(["pagesum-preprocess", "--input-format", "multinews", "--trainpref", str(train),
             "--validpref", str(test), "--testpref", str(test), *DOCUMENTS_VIEW, "--max-summary-tokens", "64",
             "--tokenizer", "sentencepiece", "--vocab-size", "500", "--destdir", data, "--no-progress"])
    save_dir = str(root / "run")
    run_cli(["fairseq-train", data, "--user-dir", USER_DIR, "--task", "paged_summarization", *DOCUMENTS_VIEW,
             "--arch", "hed_tiny", "--criterion", "paged_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
             "--optimizer", "adam", "--lr", "5e-5", "--lr-scheduler", "fixed", "--dropout", "0.0",
             "--batch-size", "2", "--max-update", "4", "--cpu", "--seed", "1", "--log-format", "simple",
             "--no-epoch-checkpoints", "--num-workers", "0", "--save-dir", save_dir])
    clusters = [[s["text"] for s in paper["sections"]] for paper in papers[6:]]
    return data, save_dir, clusters


def test_generate_writes_summaries_and_document_weights_that_score(hed_run, tmp_path):
    data, save_dir, clusters = hed_run
    hyps, weights = tmp_path / "test.hyp", tmp_path / "weights.jsonl"
    run_cli(["fairseq-generate", data, "--user-dir", USER_DIR, "--task", "paged_summarization",
             "--path", os.path.join(save_dir, "checkpoint_last.pt"), "--gen-subset", "test", "--cpu",
             "--beam", "3", "--min-len", "4", "--max-len-b", "12", "--no-repeat-ngram-size", "3",
             "--batch-size", "2", "--hypotheses-output", str(hyps), "--page-weights-output", str(weights)])
    assert len(hyps.read_text().splitlines()) == len(clusters)
    for record in (json.loads(line) for line in weights.read_text().splitlines()):
        assert len(record["page_weights"]) == len(record["tokens"])
        assert all(abs(sum(row) - 1) < 1e-4 for row in record["page_weights"]), "documents' weights sum to 1"
    output = run_cli(["pagesum-score", "--hyp", str(hyps), "--ref", os.path.join(data, "test.reference.txt"), "--json"])
    scores = json.loads(output[output.index("{"): output.rindex("}") + 1])
    assert scores["examples"] == len(clusters)
    assert {"rouge1", "rouge2", "rougeLsum"} <= set(scores["scores"])


def test_summarize_from_python_equals_fairseq_generate(hed_run, tmp_path):
    data, save_dir, clusters = hed_run
    hyps = tmp_path / "test.hyp"
    run_cli(["fairseq-generate", data, "--user-dir", USER_DIR, "--task", "paged_summarization",
             "--path", os.path.join(save_dir, "checkpoint_last.pt"), "--gen-subset", "test", "--cpu",
             "--beam", "3", "--min-len", "4", "--max-len-b", "12", "--no-repeat-ngram-size", "3",
             "--batch-size", "3", "--hypotheses-output", str(hyps)])
    hed = from_pretrained(save_dir, "checkpoint_last.pt", data_name_or_path=data)
    assert hed.view.view == "documents"
    results = hed.summarize(clusters, return_page_weights=True, **GEN)
    assert [r["summary"] for r in results] == [" ".join(h.split()) for h in hyps.read_text().splitlines()]
    for cluster, result in zip(clusters, results):
        assert result["page_weights"].shape == (len(result["tokens"]), len(hed.pages(cluster)))
        torch.testing.assert_close(result["page_weights"].sum(1), torch.ones(len(result["tokens"])), atol=1e-5, rtol=0)
