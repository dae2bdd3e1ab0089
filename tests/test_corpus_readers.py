"""Readers of every native format, and the errors they give on bad input."""

import json

import pytest

from builders.corpora import (acl_papers, copy_acl_papers, refusal, write_cohan, write_govreport, write_jsonl,
                              write_multinews)
from pagesum_plugin.corpus import errors
from pagesum_plugin.corpus.readers import Unit, example_from_raw, read_examples


@pytest.fixture(scope="module")
def papers():
    return acl_papers(3)


def _words(text: str) -> list[str]:
    return text.split()


def test_jsonl_sections_keep_names_and_text(tmp_path, papers):
    examples = list(read_examples(write_jsonl(tmp_path / "a.jsonl", papers), "jsonl"))
    assert [e.id for e in examples] == [p["id"] for p in papers]
    first, paper = examples[0], papers[0]
    assert first.kind == "sections" and first.summary == paper["summary"].strip()
    assert [u.name for u in first.units] == [s["name"].strip() for s in paper["sections"]]
    assert _words(first.text) == _words(" ".join(s["text"] for s in paper["sections"]))


def test_jsonl_documents_are_read_as_one_unit_per_document(tmp_path, papers):
    clusters = list(read_examples(write_jsonl(tmp_path / "d.jsonl", papers, "documents"), "jsonl"))
    assert clusters[0].kind == "documents" and len(clusters[0].units) == len(papers[0]["sections"])


def test_jsonl_plain_text_is_read_as_a_single_unit(tmp_path, papers):
    plain = list(read_examples(write_jsonl(tmp_path / "t.jsonl", papers, "text"), "jsonl"))
    assert plain[0].kind == "text" and len(plain[0].units) == 1


@pytest.mark.parametrize("input_format", ["arxiv", "pubmed"])
def test_cohan_format_keeps_dataset_sentences(tmp_path, papers, input_format):
    path = write_cohan(tmp_path / "train.txt", papers)
    example = next(read_examples(path, input_format))
    row = json.loads(path.read_text().splitlines()[0])
    assert example.id == row["article_id"]
    assert "<S>" not in example.summary and _words(example.summary) == _words(papers[0]["summary"])
    assert [u.name for u in example.units] == [n for n, s in zip(row["section_names"], row["sections"]) if s]
    assert example.units[0].sentence_list() == row["sections"][0]  # the dataset's own segmentation


def test_govreport_folds_subsections_into_depth_one_sections(tmp_path, papers):
    example = next(read_examples(write_govreport(tmp_path / "g.jsonl", papers), "govreport"))
    names = [s["name"] for s in papers[0]["sections"]]
    assert [u.name for u in example.units] == [n.strip() for n in names]
    assert f"{names[0]} (details)" in example.units[0].text
    assert _words(example.summary) == _words(papers[0]["summary"])


def test_govreport_plain_layout_uses_paragraphs_as_units(tmp_path, papers):
    example = next(read_examples(write_govreport(tmp_path / "g.jsonl", papers, "plain"), "govreport"))
    paragraphs = "\n".join(s["text"] for s in papers[0]["sections"]).split("\n")
    assert example.kind == "text" and len(example.units) == len([p for p in paragraphs if p.strip()])


@pytest.mark.parametrize("variant", ["src_tgt", "jsonl"])
def test_multinews_splits_clusters_into_documents(tmp_path, papers, variant):
    path = write_multinews(tmp_path, papers, variant=variant)
    examples = list(read_examples(path, "multinews"))
    assert len(examples) == len(papers)
    assert examples[0].kind == "documents"
    assert len(examples[0].units) == len(papers[0]["sections"])
    assert "NEWLINE_CHAR" not in examples[0].text
    assert _words(examples[0].units[1].text) == _words(papers[0]["sections"][1]["text"])


def test_aclsum_abstract_is_summary_and_body_sections_are_units(tmp_path):
    folder = copy_acl_papers(tmp_path / "papers", 2)
    examples = list(read_examples(folder, "aclsum"))
    assert [e.id for e in examples] == sorted(p.stem for p in folder.glob("*.json"))
    raw = json.loads(sorted(folder.glob("*.json"))[0].read_text())
    assert examples[0].summary == raw["abstract"].strip()
    assert examples[0].units[0].name == raw["pdf_parse"]["body_text"][0]["section"]


def test_example_from_raw_reads_a_string_as_one_unnamed_unit():
    assert example_from_raw("One. Two.").units == [Unit("One. Two.")]


def test_example_from_raw_reads_sections_given_as_dicts_or_name_text_pairs():
    sections = example_from_raw([{"name": "Intro", "text": "A."}, ("Method", "B.")], id="7")
    assert sections.id == "7" and sections.kind == "sections"
    assert [(u.name, u.text) for u in sections.units] == [("Intro", "A."), ("Method", "B.")]


def test_example_from_raw_reads_a_list_of_strings_as_a_cluster_of_documents():
    assert example_from_raw(["doc one", "doc two"]).kind == "documents"


# --------------------------------------------------------------------------- bad input



def _jsonl(tmp_path, *lines: bytes):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


GOOD = json.dumps({"id": "a", "summary": "S.", "text": "T."}).encode()


@pytest.mark.parametrize("line, field, reason", [
    (b'{"id": "b", "summary": "S.", "text": "T."', None, errors.MALFORMED_JSON),
    (json.dumps({"id": "b", "text": "T."}).encode(), "summary", errors.MISSING_FIELD),
    (json.dumps({"id": [5], "summary": "S.", "text": "T."}).encode(), "id", errors.WRONG_TYPE),
    (json.dumps({"id": "b", "summary": "S.", "sections": [{"name": "x", "text": 3}]}).encode(),
     "sections[0].text", errors.WRONG_TYPE),
    (json.dumps({"id": "b", "summary": "S.", "text": "  "}).encode(), "text", errors.EMPTY_DOCUMENT),
    (json.dumps({"id": "b", "summary": "\n", "text": "T."}).encode(), "summary", errors.EMPTY_SUMMARY),
    (b'{"id": "b", "summary": "S.", "text": "caf\xe9"}', "text", errors.INVALID_UTF8),
    (json.dumps({"id": "b", "summary": "S.", "documents": ["x", " "]}).encode(), "documents[1]",
     errors.EMPTY_DOCUMENT),
])
def test_bad_jsonl_line_names_file_line_and_field(tmp_path, line, field, reason):
    error = refusal(_jsonl(tmp_path, GOOD, line), "jsonl")
    assert (error.path, error.line, error.field, error.reason) == (str(tmp_path / "bad.jsonl"), 2, field, reason)
    assert "bad.jsonl, line 2" in str(error)


def test_multinews_separator_with_nothing_between_is_anrefusal(tmp_path):
    (tmp_path / "test.src").write_text("one story_separator_special_tag  story_separator_special_tag two\n")
    (tmp_path / "test.tgt").write_text("summary\n")
    error = refusal(tmp_path / "test.src", "multinews")
    assert (error.line, error.field, error.reason) == (1, "src", errors.EMPTY_BETWEEN_SEPARATORS)


def test_multinews_json_separator_with_nothing_between_is_anrefusal(tmp_path):
    path = _jsonl(tmp_path, json.dumps({"document": "a |||||   ||||| b", "summary": "s"}).encode())
    assert refusal(path, "multinews").reason == errors.EMPTY_BETWEEN_SEPARATORS


def test_multinews_files_of_different_lengths_are_anrefusal(tmp_path):
    (tmp_path / "test.src").write_text("one\ntwo\n")
    (tmp_path / "test.tgt").write_text("summary\n")
    assert refusal(tmp_path / "test.src", "multinews").reason == errors.MISMATCHED_FILES


def test_cohan_sections_and_names_must_agree(tmp_path, papers):
    path = write_cohan(tmp_path / "a.txt", papers[:1])
    row = json.loads(path.read_text())
    row["section_names"] = row["section_names"][:-1]
    path.write_text(json.dumps(row) + "\n")
    error = refusal(path, "arxiv")
    assert (error.line, error.field) == (1, "sections")


def test_govreport_parallel_lists_must_agree(tmp_path, papers):
    path = write_govreport(tmp_path / "g.jsonl", papers[:1])
    row = json.loads(path.read_text())
    row["document_sections"]["depth"].pop()
    path.write_text(json.dumps(row) + "\n")
    assert refusal(path, "govreport").field == "document_sections.depth"
