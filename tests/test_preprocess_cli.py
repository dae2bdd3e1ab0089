"""``pagesum-preprocess`` end to end: the paged data directory contract."""

import json
import logging

import numpy as np
import pytest
from fairseq.data import Dictionary, indexed_dataset

from builders.bpe import build_gpt2_bpe
from builders.corpora import (acl_papers, copy_acl_papers, write_cohan, write_govreport, write_jsonl,
                              write_multinews)
from preprocess.cli import main
from preprocess.paged_reader import read_paged_split
from preprocess.tokenizers import load_tokenizer

SPLIT_FILES = ("pages.bin", "pages.idx", "page_counts.npy", "summary.bin", "summary.idx", "ids.txt", "reference.txt")


@pytest.fixture(scope="module")
def papers():
    return acl_papers(5)


@pytest.fixture(scope="module")
def bpe(tmp_path_factory, papers):
    texts = [p["summary"] for p in papers] + [s["text"] for p in papers for s in p["sections"]]
    return build_gpt2_bpe(tmp_path_factory.mktemp("bpe"), texts, vocab_size=700, leave_out_of_dict=5)


def _gpt2_args(bpe):
    return ["--tokenizer", "gpt2", "--gpt2-encoder-json", str(bpe.encoder_json),
            "--gpt2-vocab-bpe", str(bpe.vocab_bpe), "--gpt2-dict", str(bpe.dict_txt), "--no-progress"]


def _run(*args) -> int:
    return main([str(a) for a in args])


def _split(data, split):
    pages = indexed_dataset.MMapIndexedDataset(str(data / f"{split}.pages"))
    summaries = indexed_dataset.MMapIndexedDataset(str(data / f"{split}.summary"))
    return pages, np.load(data / f"{split}.page_counts.npy"), summaries


def test_gpt2_discourse_directory_follows_the_contract(tmp_path, bpe):
    papers_dir = copy_acl_papers(tmp_path / "papers", 4)
    data = tmp_path / "data"
    assert _run("--input-format", "aclsum", "--trainpref", papers_dir, "--validpref", papers_dir,
                "--locality", "discourse", "--max-pages", 5, "--max-page-tokens", 128,
                "--max-summary-tokens", 64, "--destdir", data, *_gpt2_args(bpe)) == 0
    assert (data / "dict.txt").read_bytes() == bpe.dict_txt.read_bytes()
    assert (data / "encoder.json").read_bytes() == bpe.encoder_json.read_bytes()
    assert (data / "vocab.bpe").read_bytes() == bpe.vocab_bpe.read_bytes()
    dictionary = Dictionary.load(str(data / "dict.txt"))
    for split in ("train", "valid"):
        assert all((data / f"{split}.{name}").exists() for name in SPLIT_FILES)
        pages, counts, summaries = _split(data, split)
        assert counts.dtype == np.int64 and counts.shape == (4,) and counts.min() >= 1
        assert counts.sum() == len(pages) and counts.max() <= 5 and len(summaries) == 4
        for page in list(pages) + list(summaries):
            assert page[0] == dictionary.bos() and page[-1] == dictionary.eos() and len(page) >= 3
        assert max(len(p) for p in pages) == 128 and max(len(s) for s in summaries) <= 64
        ids = (data / f"{split}.ids.txt").read_text().splitlines()
        assert ids == sorted(p.stem for p in papers_dir.glob("*.json"))
        references = (data / f"{split}.reference.txt").read_text().splitlines()
        assert len(references) == 4 and all(r and "  " not in r for r in references)
    meta = json.loads((data / "meta.json").read_text())
    assert {k: meta[k] for k in ("format_version", "tokenizer", "locality", "max_pages", "max_page_tokens",
                                 "max_summary_tokens", "input_format")} == {
        "format_version": 1, "tokenizer": "gpt2", "locality": "discourse", "max_pages": 5,
        "max_page_tokens": 128, "max_summary_tokens": 64, "input_format": "aclsum"}
    stats = meta["stats"]["train"]
    assert stats["examples"] == 4 and stats["pages_per_example_max"] == counts.max()
    assert stats["pages_per_example_mean"] == pytest.approx(counts.mean(), abs=1e-4)
    assert 0 < stats["share_pages_truncated"] <= 1 and 0 < stats["share_source_tokens_lost"] < 1
    assert stats["share_summaries_truncated"] > 0 and stats["skipped"] == {}


def test_document_pages_read_back_as_the_source_documents(tmp_path, bpe, papers):
    source = write_multinews(tmp_path, papers[:3], split="test", variant="jsonl")
    data = tmp_path / "data"
    assert _run("--input-format", "multinews", "--testpref", source, "--locality", "document",
                "--max-pages", 50, "--max-page-tokens", 100000, "--destdir", data, *_gpt2_args(bpe)) == 0
    examples = list(read_paged_split(data, "test"))
    assert [e.id for e in examples] == ["test-1", "test-2", "test-3"]
    for example, paper in zip(examples, papers):
        # The dictionary lacks a few ids, which come back as <unk>: compare elsewhere.
        expected = [s["text"].strip() for s in paper["sections"]]
        assert len(example.pages) == len(expected)
        assert sum(a == b for a, b in zip(example.pages, expected)) >= len(expected) - 1
        assert example.reference == " ".join(paper["summary"].split())


@pytest.mark.parametrize("input_format, writer", [
    ("jsonl", lambda d, p: write_jsonl(d / "train.jsonl", p)),
    ("arxiv", lambda d, p: write_cohan(d / "train.txt", p)),
    ("govreport", lambda d, p: write_govreport(d / "train.jsonl", p)),
    ("multinews", lambda d, p: write_multinews(d, p)),
])
def test_every_format_binarizes_with_spatial_pages(tmp_path, bpe, papers, input_format, writer):
    data = tmp_path / "data"
    assert _run("--input-format", input_format, "--trainpref", writer(tmp_path, papers[:3]),
                "--num-pages", 3, "--max-page-tokens", 256, "--destdir", data, *_gpt2_args(bpe)) == 0
    pages, counts, summaries = _split(data, "train")
    assert counts.tolist() == [3, 3, 3] and len(pages) == 9 and len(summaries) == 3


def test_outputs_are_byte_identical_across_runs_and_worker_counts(tmp_path, bpe, papers):
    source = write_cohan(tmp_path / "train.txt", papers)
    outputs = []
    for run, workers in enumerate((1, 2, 2)):
        data = tmp_path / f"data{run}"
        assert _run("--input-format", "pubmed", "--trainpref", source, "--testpref", source, "--workers", workers,
                    "--num-pages", 4, "--max-page-tokens", 200, "--destdir", data, *_gpt2_args(bpe)) == 0
        outputs.append({p.name: p.read_bytes() for p in sorted(data.iterdir())})
    assert outputs[0] == outputs[1] == outputs[2]


def test_sentencepiece_is_trained_on_train_and_travels_with_the_data(tmp_path, papers):
    train, valid = write_cohan(tmp_path / "train.txt", papers[:4]), write_cohan(tmp_path / "val.txt", papers[4:])
    runs = []
    for run in range(2):
        data = tmp_path / f"data{run}"
        assert _run("--input-format", "arxiv", "--trainpref", train, "--validpref", valid, "--tokenizer",
                    "sentencepiece", "--vocab-size", 400, "--locality", "discourse", "--destdir", data,
                    "--no-progress") == 0
        runs.append({p.name: p.read_bytes() for p in sorted(data.iterdir())})
    assert runs[0] == runs[1]
    data = tmp_path / "data0"
    tokenizer = load_tokenizer(data)
    dictionary = Dictionary.load(str(data / "dict.txt"))
    assert len(dictionary) == 4 + 400 - 3
    pages, _, _ = _split(data, "train")
    text = tokenizer.decode([dictionary[i] for i in pages[0][1:-1].tolist()])
    assert text.startswith(papers[0]["sections"][0]["name"].strip() + ":")
    example = next(read_paged_split(data, "valid"))
    assert example.id == papers[4]["id"] and len(example.pages) >= 1


def test_bad_input_stops_with_file_line_and_field(tmp_path, bpe, caplog):
    path = tmp_path / "train.jsonl"
    path.write_text('{"id": "a", "summary": "S.", "text": "T."}\n{"id": "b", "summary": "", "text": "T."}\n')
    with caplog.at_level(logging.ERROR):
        assert _run("--input-format", "jsonl", "--trainpref", path, "--destdir", tmp_path / "d",
                    *_gpt2_args(bpe)) == 1
    assert f"{path}, line 2, field 'summary': empty summary" in caplog.text


def test_skip_invalid_counts_every_skipped_example_by_reason(tmp_path, bpe, caplog):
    path = tmp_path / "train.jsonl"
    lines = ['{"id": "a", "summary": "S.", "text": "T."}', '{"id": "b", "summary": "", "text": "T."}',
             '{"id": "c", "summary": "S.", "text": ""}', "{not json", '{"id": "d", "summary": "S."}',
             '{"id": "e", "summary": "S.", "sections": [{"name": "x", "text": "T."}]}']
    path.write_bytes(("\n".join(lines) + "\n").encode() + b'{"id": "f", "summary": "\xff", "text": "T."}\n')
    with caplog.at_level(logging.INFO):
        assert _run("--input-format", "jsonl", "--trainpref", path, "--destdir", tmp_path / "d", "--skip-invalid",
                    "--workers", 2, *_gpt2_args(bpe)) == 0
    stats = json.loads((tmp_path / "d" / "meta.json").read_text())["stats"]["train"]
    assert stats["examples"] == 2 and stats["skipped_total"] == 5
    assert stats["skipped"] == {"empty_document": 1, "empty_summary": 1, "invalid_utf8": 1,
                                "malformed_json": 1, "missing_field": 1}
    assert (tmp_path / "d" / "train.ids.txt").read_text() == "a\ne\n"
    assert "skipped: empty_document: 1, empty_summary: 1, invalid_utf8: 1" in caplog.text
    assert "line 7, field 'summary'" in caplog.text
