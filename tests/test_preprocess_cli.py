"""``pagesum-preprocess`` end to end: the data directory contract."""

import json
import logging

import pytest

from builders.bpe import build_gpt2_bpe
from builders.corpora import (acl_papers, copy_acl_papers, write_cohan, write_govreport, write_jsonl,
                              write_multinews)
from pagesum_plugin.corpus import readers
from pagesum_plugin.corpus.codec import TextCodec
from pagesum_plugin.corpus.format import FORMAT_VERSION, CorpusMeta
from pagesum_plugin.corpus.storage import CorpusSplit, load_dictionary
from pagesum_plugin.corpus.sentences import nltk_punkt_sentences
from pagesum_plugin.corpus.views import ViewConfig, assemble_pages, plan_pages
from pagesum_plugin.evaluation.data import iter_documents
from pagesum_preprocess import binarize
from pagesum_preprocess.cli import main

SPLIT_FILES = ("units.bin", "units.idx", "heads.bin", "heads.idx", "names.bin", "names.idx", "summary.bin",
               "summary.idx", "structure.npz", "ids.txt", "reference.txt")


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


def _pages(data, split, view: ViewConfig | None = None):
    """Every example's pages under ``view`` (default: the corpus's own), and its summaries."""
    meta = CorpusMeta.load(data)
    view = view or ViewConfig(meta.view, meta.num_pages, meta.max_pages, meta.max_page_tokens,
                              spatial_split=meta.spatial_split)
    dictionary, corpus = load_dictionary(data), CorpusSplit(data, split)
    pages = [assemble_pages(corpus.document(i), view, dictionary.bos(), dictionary.eos()) for i in range(len(corpus))]
    return pages, [corpus.summary(i) for i in range(len(corpus))]


@pytest.fixture(scope="module")
def discourse_data(tmp_path_factory, bpe):
    tmp = tmp_path_factory.mktemp("discourse")
    papers_dir = copy_acl_papers(tmp / "papers", 4)
    data = tmp / "data"
    assert _run("--input-format", "aclsum", "--trainpref", papers_dir, "--validpref", papers_dir,
                "--locality", "discourse", "--max-pages", 5, "--max-page-tokens", 128,
                "--max-summary-tokens", 64, "--destdir", data, *_gpt2_args(bpe)) == 0
    return papers_dir, data


def test_the_directory_holds_the_tokenizer_files_unchanged(discourse_data, bpe):
    _, data = discourse_data
    assert (data / "dict.txt").read_bytes() == bpe.dict_txt.read_bytes()
    assert (data / "encoder.json").read_bytes() == bpe.encoder_json.read_bytes()
    assert (data / "vocab.bpe").read_bytes() == bpe.vocab_bpe.read_bytes()


def test_every_split_has_every_file_of_the_format(discourse_data):
    papers_dir, data = discourse_data
    for split in ("train", "valid"):
        assert all((data / f"{split}.{name}").exists() for name in SPLIT_FILES)
        assert (data / f"{split}.ids.txt").read_text().splitlines() == sorted(p.stem for p in papers_dir.glob("*.json"))
        references = (data / f"{split}.reference.txt").read_text().splitlines()
        assert len(references) == 4 and all(r and "  " not in r for r in references)


def test_meta_records_the_default_view_and_is_versioned(discourse_data):
    _, data = discourse_data
    meta = CorpusMeta.load(data)
    assert (meta.format_version, meta.tokenizer, meta.dataset) == (FORMAT_VERSION, "gpt2", "aclsum")
    assert (meta.view, meta.max_pages, meta.max_page_tokens, meta.max_summary_tokens) == ("discourse", 5, 128, 64)


def test_the_default_view_gives_pages_within_its_limits(discourse_data):
    _, data = discourse_data
    dictionary = load_dictionary(data)
    pages, _ = _pages(data, "train")
    assert all(1 <= len(example) <= 5 for example in pages)
    for page in (p for example in pages for p in example):
        assert page[0] == dictionary.bos() and page[-1] == dictionary.eos() and 3 <= len(page) <= 128
    assert max(len(p) for example in pages for p in example) == 128


def test_summaries_are_stored_whole_and_cut_only_when_loaded(discourse_data):
    _, data = discourse_data
    _, summaries = _pages(data, "train")
    assert max(len(s) for s in summaries) > 62  # longer than the 64-token default, not cut on disk


def test_statistics_describe_the_default_view(discourse_data):
    _, data = discourse_data
    meta = CorpusMeta.load(data)
    corpus = CorpusSplit(data, "train")
    counts = plan_pages(corpus.structure, ViewConfig("discourse", max_pages=5, max_page_tokens=128)).page_counts
    stats = meta.stats["train"]
    assert stats["examples"] == 4 and stats["pages_per_example_max"] == counts.max()
    assert stats["pages_per_example_mean"] == pytest.approx(counts.mean(), abs=1e-4)
    assert 0 < stats["share_pages_truncated"] <= 1 and 0 < stats["share_source_tokens_lost"] < 1
    assert stats["share_summaries_truncated"] > 0 and stats["skipped"] == {}


def test_one_corpus_is_read_through_any_view_without_preprocessing_again(discourse_data):
    _, data = discourse_data
    spatial, _ = _pages(data, "train", ViewConfig("spatial", num_pages=3, max_page_tokens=64))
    token, _ = _pages(data, "train", ViewConfig("token", num_pages=4, max_page_tokens=32))
    assert [len(p) for p in spatial] == [3, 3, 3, 3]
    assert all(len(p) == 4 and all(len(page) == 32 for page in p) for p in token)


def test_document_groups_read_back_as_the_source_documents(tmp_path, bpe, papers):
    source = write_multinews(tmp_path, papers[:3], split="test", variant="jsonl")
    data = tmp_path / "data"
    assert _run("--input-format", "multinews", "--testpref", source, "--locality", "document",
                "--max-pages", 50, "--max-page-tokens", 100000, "--destdir", data, *_gpt2_args(bpe)) == 0
    documents = list(iter_documents(str(data), "test"))
    assert [d.id for d in documents] == ["test-1", "test-2", "test-3"]
    for document, paper in zip(documents, papers):
        # The dictionary lacks a few ids, which come back as <unk>: compare elsewhere.
        expected = [" ".join(s["text"].split()) for s in paper["sections"]]
        assert len(document.parts) == len(expected)
        assert sum(" ".join(a) == b for a, b in zip(document.parts, expected)) >= len(expected) - 1
        assert document.summary == " ".join(paper["summary"].split())


def test_the_dataset_name_is_the_input_format_unless_given(tmp_path, bpe, papers):
    """--dataset names a corpus read through a generic format, so that it decodes with its own
    row of the generation defaults (WCEP and Multi-XScience are jsonl files)."""
    source = write_jsonl(tmp_path / "test.jsonl", papers[:2])
    for name, flags in (("jsonl", []), ("wcep", ["--dataset", "wcep"])):
        data = tmp_path / name
        assert _run("--input-format", "jsonl", "--testpref", source, *flags, "--destdir", data, *_gpt2_args(bpe)) == 0
        assert CorpusMeta.load(data).dataset == name


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
    pages, summaries = _pages(data, "train")
    assert [len(p) for p in pages] == [3, 3, 3] and len(summaries) == 3


def test_the_spatial_split_is_the_corpus_default_views(tmp_path, bpe, papers):
    source = write_jsonl(tmp_path / "train.jsonl", papers[:3])
    pages = {}
    for rule in ("authors", "even"):
        data = tmp_path / rule
        assert _run("--input-format", "jsonl", "--trainpref", source, "--num-pages", 4, "--spatial-split", rule,
                    "--destdir", data, *_gpt2_args(bpe)) == 0
        assert CorpusMeta.load(data).spatial_split == rule
        pages[rule] = [[list(page) for page in example] for example in _pages(data, "train")[0]]
    assert pages["authors"] != pages["even"]  # n // k sentences a page, the rest on the last, against spread evenly


def test_outputs_are_byte_identical_across_runs_and_worker_counts(tmp_path, bpe, papers, monkeypatch):
    pools, ordered_map = [], binarize.ordered_map  # the worker count each split was encoded with

    def recording(function, chunks, workers, *rest, **kwargs):
        pools.append(workers)
        return ordered_map(function, chunks, workers, *rest, **kwargs)

    monkeypatch.setattr(binarize, "ordered_map", recording)
    source = write_cohan(tmp_path / "train.txt", papers)
    outputs = []
    for run, workers in enumerate((1, 2, 2)):
        data = tmp_path / f"data{run}"
        assert _run("--input-format", "pubmed", "--trainpref", source, "--testpref", source, "--workers", workers,
                    "--num-pages", 4, "--max-page-tokens", 200, "--destdir", data, *_gpt2_args(bpe)) == 0
        outputs.append({p.name: p.read_bytes() for p in sorted(data.iterdir())})
    assert pools == [1, 1, 2, 2, 2, 2]  # train and test of each run, in the processes asked for
    assert outputs[0] == outputs[1] == outputs[2]


def test_no_progress_hides_the_progress_bar_and_nothing_else(tmp_path, bpe, papers, capfd):
    source = write_jsonl(tmp_path / "train.jsonl", papers[:2])
    with_bar = [arg for arg in _gpt2_args(bpe) if arg != "--no-progress"]
    shown = {}
    for flags in ((), ("--no-progress",)):
        data = tmp_path / f"data{len(flags)}"
        assert _run("--input-format", "jsonl", "--trainpref", source, "--destdir", data, *flags, *with_bar) == 0
        shown[flags] = capfd.readouterr().err
    assert " examples" in shown[()] and " examples" not in shown[("--no-progress",)]
    written = [{p.name: p.read_bytes() for p in sorted((tmp_path / f"data{n}").iterdir())} for n in (0, 1)]
    assert written[0] == written[1]


def _files(directory) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_split_plain_text_is_byte_identical_across_worker_counts(monkeypatch, tmp_path, bpe, papers):
    """Plain text is split into sentences in the workers, two papers per chunk here."""
    monkeypatch.setattr(binarize, "CHUNK_SIZE", 2)
    source = write_jsonl(tmp_path / "train.jsonl", papers, "text")
    outputs = []
    for run, workers in enumerate((1, 2, 2)):
        data = tmp_path / f"data{run}"
        assert _run("--input-format", "jsonl", "--trainpref", source, "--workers", workers, "--destdir", data,
                    *_gpt2_args(bpe)) == 0
        outputs.append(_files(data))
    assert outputs[0] == outputs[1] == outputs[2]


def test_split_plain_text_writes_the_bytes_of_nltk_punkts_sentences(monkeypatch, tmp_path, bpe, papers):
    source = write_jsonl(tmp_path / "train.jsonl", papers, "text")
    command = ["--input-format", "jsonl", "--trainpref", source, "--workers", 1, *_gpt2_args(bpe)]
    assert _run(*command, "--destdir", tmp_path / "ours") == 0
    with monkeypatch.context() as patch:
        patch.setattr(readers, "split_sentences", nltk_punkt_sentences)
        assert _run(*command, "--destdir", tmp_path / "nltk") == 0
    assert _files(tmp_path / "ours") == _files(tmp_path / "nltk")


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
    codec = TextCodec.from_data_dir(data)
    assert len(codec.dictionary) == 4 + 400 - 3
    pages, _ = _pages(data, "train")
    assert codec.decode(pages[0][0]).startswith(papers[0]["sections"][0]["name"].strip() + ":")
    assert CorpusSplit(data, "valid").example_ids() == [papers[4]["id"]]


def test_a_trained_sentencepiece_model_is_reused_with_its_dictionary(tmp_path, papers):
    """--sentencepiece-model: a second corpus shares the first one's vocabulary, so that a model
    trained on one reads the other (the demo's copying corpus and its papers)."""
    first, second = write_cohan(tmp_path / "first.txt", papers[:4]), write_cohan(tmp_path / "second.txt", papers[4:])
    assert _run("--input-format", "arxiv", "--trainpref", first, "--tokenizer", "sentencepiece", "--vocab-size", 400,
                "--destdir", tmp_path / "a", "--no-progress") == 0
    assert _run("--input-format", "arxiv", "--trainpref", second, "--tokenizer", "sentencepiece", "--sentencepiece-model",
                tmp_path / "a" / "sentencepiece.model", "--destdir", tmp_path / "b", "--no-progress") == 0
    for name in ("sentencepiece.model", "dict.txt"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert CorpusMeta.load(tmp_path / "b").vocab_size == 400  # the model's, not --vocab-size's default
    _, summaries = _pages(tmp_path / "b", "train")
    assert TextCodec.from_data_dir(tmp_path / "a").decode(summaries[0]) == " ".join(papers[4]["summary"].split())


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


def test_a_failed_run_leaves_no_output_directory_behind(tmp_path, bpe):
    path = tmp_path / "train.jsonl"
    path.write_text('{"id": "a", "summary": "S.", "text": "T."}\n{"id": "b", "summary": "", "text": "T."}\n')
    assert _run("--input-format", "jsonl", "--trainpref", path, "--destdir", tmp_path / "d", *_gpt2_args(bpe)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.jsonl"]


def test_a_directory_in_an_older_layout_is_refused_with_what_to_do(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"format_version": 1, "tokenizer": "gpt2"}))
    with pytest.raises(ValueError, match="format_version 1.*run pagesum-preprocess again"):
        CorpusMeta.load(tmp_path)


BAD_SECOND_LINE = '{"id": "a", "summary": "S.", "text": "T."}\n{"id": "b", "summary": "", "text": "T."}\n'


@pytest.mark.parametrize("split", ["trainpref", "testpref"])
def test_bad_input_gives_the_same_one_line_message_in_every_split(tmp_path, split, caplog):
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text("".join(json.dumps({"id": str(i), "summary": f"Summary {i} of paper {i * 7}.",
                                        "text": " ".join(f"Word{j * i} appears {j} times." for j in range(20))}) + "\n"
                            for i in range(20)))
    bad.write_text(BAD_SECOND_LINE)
    splits = {"trainpref": good, "testpref": good, split: bad}
    with caplog.at_level(logging.ERROR):
        assert _run("--input-format", "jsonl", "--trainpref", splits["trainpref"], "--testpref", splits["testpref"],
                    "--tokenizer", "sentencepiece", "--vocab-size", 30, "--destdir", tmp_path / "d",
                    "--no-progress") == 1
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        f"{bad}, line 2, field 'summary': empty summary [empty_summary] (use --skip-invalid to skip such examples)"]
    assert not (tmp_path / "d").exists()


def test_blank_lines_are_counted_not_silently_dropped(tmp_path, bpe):
    path = tmp_path / "train.jsonl"
    path.write_text('{"id": "a", "summary": "S.", "text": "T."}\n\n  \n{"id": "b", "summary": "S.", "text": "T."}\n')
    assert _run("--input-format", "jsonl", "--trainpref", path, "--destdir", tmp_path / "d", *_gpt2_args(bpe)) == 0
    stats = CorpusMeta.load(tmp_path / "d").stats["train"]
    assert stats["examples"] == 2 and stats["skipped"] == {"blank_line": 2}


def test_a_byte_order_mark_before_the_first_line_is_accepted(tmp_path, bpe):
    path = tmp_path / "train.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"id": "a", "summary": "S.", "text": "T."}\n')
    assert _run("--input-format", "jsonl", "--trainpref", path, "--destdir", tmp_path / "d", *_gpt2_args(bpe)) == 0
    assert CorpusSplit(tmp_path / "d", "train").example_ids() == ["a"]


def test_numeric_ids_and_unnamed_sections_are_accepted_and_what_was_assumed_is_counted(tmp_path, bpe):
    path = tmp_path / "train.jsonl"
    path.write_text('{"id": 7, "summary": "S.", "sections": [{"text": "T."}, {"name": "B", "text": "U."}]}\n')
    assert _run("--input-format", "jsonl", "--trainpref", path, "--destdir", tmp_path / "d", *_gpt2_args(bpe)) == 0
    assert CorpusSplit(tmp_path / "d", "train").example_ids() == ["7"]
    assert CorpusMeta.load(tmp_path / "d").stats["train"]["assumed"] == {
        "numeric_id_read_as_text": 1, "section_without_name": 1}


def test_an_empty_multinews_cluster_is_kept_as_one_placeholder_page_and_counted(tmp_path, bpe):
    (tmp_path / "test.src").write_text("first story . story_separator_special_tag second story .\n\n")
    (tmp_path / "test.tgt").write_text("a summary .\nanother summary .\n")
    assert _run("--input-format", "multinews", "--testpref", tmp_path / "test.src", "--locality", "document",
                "--destdir", tmp_path / "d", *_gpt2_args(bpe)) == 0
    stats = CorpusMeta.load(tmp_path / "d").stats["test"]
    assert stats["examples"] == 2 and stats["assumed"] == {"empty_cluster_as_placeholder_page": 1}
    documents = list(iter_documents(str(tmp_path / "d"), "test"))
    assert documents[1].parts == [["."]]
