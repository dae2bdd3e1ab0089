"""The Python API summarizes raw documents exactly as the command-line pipeline does."""

import json
import os
import re
from pathlib import Path

import pytest
import torch

from builders.corpora import acl_papers, write_jsonl
from builders.cli import TRAIN_FLAGS, USER_DIR, run_cli
from pagesum_plugin import from_pretrained

pytestmark = pytest.mark.slow  # end-to-end runs of fairseq-train and fairseq-generate


@pytest.fixture(scope="module")
def acl_run(tmp_path_factory):
    """Six real papers preprocessed with sentencepiece (discourse pages) and a tiny model
    trained for a few updates: (data_dir, save_dir, papers)."""
    root = tmp_path_factory.mktemp("acl")
    papers = acl_papers(10)
    write_jsonl(root / "train.jsonl", papers[:6])
    write_jsonl(root / "test.jsonl", papers[6:])
    data = str(root / "data")
    run_cli(["pagesum-preprocess", "--input-format", "jsonl", "--trainpref", str(root / "train.jsonl"),
             "--validpref", str(root / "test.jsonl"), "--testpref", str(root / "test.jsonl"),
             "--locality", "discourse", "--max-pages", "4", "--max-page-tokens", "96", "--max-summary-tokens", "64",
             "--tokenizer", "sentencepiece", "--vocab-size", "500", "--destdir", data, "--no-progress"])
    save_dir = str(root / "run")
    run_cli(["fairseq-train", data, *TRAIN_FLAGS, "--max-update", "6", "--save-dir", save_dir])
    return data, save_dir, papers[6:]


GEN = dict(beam=3, lenpen=1.0, min_len=4, max_len_b=12, no_repeat_ngram_size=3)


def test_summarize_equals_fairseq_generate_on_the_same_documents(acl_run, tmp_path):
    data, save_dir, papers = acl_run
    hyps = tmp_path / "hyps.txt"
    run_cli(["fairseq-generate", data, "--user-dir", USER_DIR,
             "--task", "paged_summarization", "--path", os.path.join(save_dir, "checkpoint_last.pt"),
             "--gen-subset", "test", "--cpu", "--beam", "3", "--min-len", "4", "--max-len-b", "12",
             "--no-repeat-ngram-size", "3", "--batch-size", "3", "--hypotheses-output", str(hyps)])
    from_cli = hyps.read_text().splitlines()

    pagesum = from_pretrained(save_dir, "checkpoint_last.pt", data_name_or_path=data)
    documents = [[(s["name"], s["text"]) for s in p["sections"]] for p in papers]
    from_python = pagesum.summarize(documents, **GEN)
    assert len(from_cli) == len(papers)
    assert from_python == [" ".join(h.split()) for h in from_cli]


def test_every_document_shape_is_accepted_and_batching_changes_nothing(acl_run):
    data, save_dir, papers = acl_run
    pagesum = from_pretrained(save_dir, "checkpoint_last.pt", data_name_or_path=data)
    text = " ".join(s["text"] for s in papers[0]["sections"])
    sections = [{"name": s["name"], "text": s["text"]} for s in papers[1]["sections"]]
    cluster = [s["text"] for s in papers[2]["sections"]]
    documents = [text, sections, cluster, text]
    batched = pagesum.summarize(documents, batch_size=4, **GEN)
    alone = [pagesum.summarize([d], batch_size=1, **GEN)[0] for d in documents]
    assert batched == alone
    assert all(isinstance(s, str) for s in batched)
    assert pagesum.summarize(text, **GEN) == [batched[0]]
    spatial = pagesum.summarize([text], locality="spatial", num_pages=3, return_page_weights=True, **GEN)[0]
    assert spatial["page_weights"].shape == (len(spatial["tokens"]), 3)


def test_a_plain_string_on_a_discourse_model_is_read_in_spatial_pages(acl_run):
    data, save_dir, papers = acl_run
    pagesum = from_pretrained(save_dir, "checkpoint_last.pt", data_name_or_path=data)
    assert pagesum.view.view == "discourse"
    text = " ".join(s["text"] for s in papers[0]["sections"])  # a whole paper, thousands of words
    pages = pagesum.pages(text)
    assert len(pages) == pagesum.view.num_pages > 1, "not one page holding the first ~100 tokens"
    assert all(torch.equal(a, b) for a, b in zip(pages, pagesum.pages(text, locality="spatial")))
    result = pagesum.summarize(text, return_page_weights=True, **GEN)[0]
    assert result["page_weights"].shape == (len(result["tokens"]), pagesum.view.num_pages)


def test_max_pages_given_to_summarize_caps_the_pages_it_reads(acl_run):
    data, save_dir, papers = acl_run
    pagesum = from_pretrained(save_dir, "checkpoint_last.pt", data_name_or_path=data)
    sections = [(s["name"], s["text"]) for s in papers[0]["sections"]]
    assert len(pagesum.pages(sections)) == pagesum.view.max_pages == 4
    result = pagesum.summarize([sections], max_pages=2, return_page_weights=True, **GEN)[0]
    assert result["page_weights"].shape == (len(result["tokens"]), 2)


def test_page_weights_are_returned_per_step_and_sum_to_one(acl_run):
    data, save_dir, papers = acl_run
    pagesum = from_pretrained(save_dir, "checkpoint_last.pt", data_name_or_path=data)
    sections = [(s["name"], s["text"]) for s in papers[0]["sections"]]
    result = pagesum.summarize([sections], return_page_weights=True, **GEN)[0]
    weights = result["page_weights"]
    assert weights.shape == (len(result["tokens"]), len(pagesum.pages(sections)))
    torch.testing.assert_close(weights.sum(1), torch.ones(weights.size(0)), atol=1e-5, rtol=0)

    forced = pagesum.teacher_forced_page_weights(sections, papers[0]["summary"])
    assert forced["page_weights"].shape == (len(forced["tokens"]), len(pagesum.pages(sections)))
    torch.testing.assert_close(forced["page_weights"].sum(1), torch.ones(len(forced["tokens"])), atol=1e-5, rtol=0)


def test_summarize_decodes_with_fixed_shapes_as_step_by_step_and_hands_its_decoding_to_the_generator(acl_run):
    data, save_dir, papers = acl_run
    pagesum = from_pretrained(save_dir, "checkpoint_last.pt", data_name_or_path=data)
    documents = [[(s["name"], s["text"]) for s in p["sections"]] for p in papers]
    assert pagesum.summarize(documents, decoding="static", **GEN) == pagesum.summarize(documents, decoding="eager",
                                                                                        **GEN)
    with pytest.raises(ValueError, match="decoding='fast'"):
        pagesum.summarize(documents, decoding="fast", **GEN)


def test_summarize_decodes_the_pages_the_tasks_top_pages_keeps_unless_the_call_says_otherwise(acl_run):
    """--top-pages and summarize(top_pages=) read one setting: the task's."""
    data, save_dir, papers = acl_run
    pagesum = from_pretrained(save_dir, "checkpoint_last.pt", data_name_or_path=data, top_pages=1)
    documents = [[(s["name"], s["text"]) for s in p["sections"]] for p in papers]
    pages_read = [int((r["page_weights"].sum(0) > 0).sum())
                  for r in pagesum.summarize(documents, return_page_weights=True, **GEN)]
    assert pages_read == [1] * len(documents)
    every_page = pagesum.summarize(documents, return_page_weights=True, top_pages=0, **GEN)
    assert [int((r["page_weights"].sum(0) > 0).sum()) for r in every_page] == [
        len(pagesum.pages(d)) for d in documents]


def test_generate_writes_page_weights_in_input_order_keyed_by_input_id(acl_run, tmp_path):
    data, save_dir, papers = acl_run
    out, hyp = tmp_path / "weights.jsonl", tmp_path / "test.hyp"
    run_cli(["fairseq-generate", data, "--user-dir", USER_DIR,
             "--task", "paged_summarization", "--path", os.path.join(save_dir, "checkpoint_last.pt"),
             "--gen-subset", "test", "--cpu", "--beam", "2", "--max-len-b", "8", "--batch-size", "3",
             "--page-weights-output", str(out), "--hypotheses-output", str(hyp)])
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == (Path(data) / "test.ids.txt").read_text().splitlines()
    assert [r["hypothesis"] for r in records] == hyp.read_text().splitlines()
    for record in records:
        assert len(record["page_weights"]) == len(record["tokens"])
        assert all(abs(sum(row) - 1) < 1e-4 for row in record["page_weights"])


def test_checkpoints_can_be_selected_by_validation_rouge(acl_run, tmp_path):
    data, _, _ = acl_run
    save_dir = tmp_path / "rouge_run"
    log = run_cli(["fairseq-train", data, *TRAIN_FLAGS, "--max-update", "4", "--save-dir", str(save_dir),
                   "--eval-rouge", "--eval-rouge-args", '{"beam": 2, "max_len_b": 10}',
                   "--best-checkpoint-metric", "rouge", "--maximize-best-checkpoint-metric"])
    scores = [float(x) for x in re.findall(r"valid on 'valid' subset .*?\| rouge ([\d.]+)", log)]
    assert scores, "validation must log the rouge metric"
    assert "rouge1" in log and "rougeLsum" in log
    best = torch.load(str(save_dir / "checkpoint_best.pt"), weights_only=True)
    assert best["extra_state"]["best"] == pytest.approx(max(scores), abs=0.01)
