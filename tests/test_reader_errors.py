"""Bad input the readers refuse in one line that names the file, the line and the field, never
dropping anything silently; and how ``pagesum-preprocess`` reports or skips it."""

import json
import logging

import pytest

from builders.bpe import build_gpt2_bpe
from builders.corpora import refusal
from pagesum_plugin.corpus import errors
from pagesum_plugin.corpus.format import CorpusMeta
from pagesum_plugin.corpus.readers import read_examples
from pagesum_preprocess.cli import main

SKIP_HINT = "use --skip-invalid"
GOOD = '{"id": "a", "summary": "The fox jumps.", "text": "The quick brown fox."}'
PAPER = {"abstract": "The fox jumps.",
         "pdf_parse": {"body_text": [{"text": "The quick brown fox.", "section": "Intro", "sec_num": "1"}]}}



def _jsonl(tmp_path, *lines: str):
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _aclsum(folder, bad: dict):
    folder.mkdir()
    (folder / "good.json").write_text(json.dumps(PAPER))
    (folder / "bad.json").write_text(json.dumps(bad))
    return folder


def _paper(**changes) -> dict:
    paper = json.loads(json.dumps(PAPER))
    paper.update({k: v for k, v in changes.items() if k != "section"})
    if "section" in changes:
        paper["pdf_parse"]["body_text"][0]["section"] = changes["section"]
    return paper


# --------------------------------------------------------------------------- jsonl: one document field


@pytest.mark.parametrize("fields, field, named", [
    ({"text": "The quick brown fox.", "documents": ["X y."]}, "text", "'documents' and 'text' are both given"),
    ({"sections": [{"name": "A", "text": "T."}], "text": "T."}, "text", "'sections' and 'text' are both given"),
    ({"sections": [{"name": "A", "text": "T."}], "documents": ["X."]}, "documents",
     "'sections' and 'documents' are both given"),
    ({"sections": [], "documents": [], "text": ""}, "documents", "'sections', 'documents' and 'text' are all given"),
])
def test_a_jsonl_example_gives_exactly_one_of_sections_documents_or_text(tmp_path, fields, field, named):
    path = _jsonl(tmp_path, GOOD, json.dumps({"id": "b", "summary": "The fox jumps.", **fields}))
    error = refusal(path, "jsonl")
    assert (error.line, error.field, error.reason) == (2, field, errors.CONFLICTING_FIELDS)
    assert str(error).startswith(f"{path}, line 2, field '{field}': {named}; an example gives exactly one of")


@pytest.mark.parametrize("text", ["", "  \n"])
def test_an_empty_section_is_an_error_like_an_empty_document_of_a_cluster(tmp_path, text):
    sections = [{"name": "A", "text": "The fox."}, {"name": "B", "text": "Dog."}, {"name": "C", "text": text}]
    path = _jsonl(tmp_path, GOOD, json.dumps({"id": "b", "summary": "S.", "sections": sections}))
    error = refusal(path, "jsonl")
    assert (error.line, error.field, error.reason) == (2, "sections[2].text", errors.EMPTY_DOCUMENT)
    assert f"{path}, line 2, field 'sections[2].text': section 2 is empty" in str(error)


# --------------------------------------------------------------------------- aclsum: fields of the wrong type


ACLSUM_WRONG_TYPES = [
    (_paper(section=3), "pdf_parse.body_text[0].section", "expected str, got int"),
    (_paper(abstract=["Our text is short."]), "abstract[0]", "expected dict, got str"),
    (_paper(abstract=[5]), "abstract[0]", "expected dict, got int"),
    (_paper(abstract=["We study foxes."]), "abstract[0]", "expected dict, got str"),
]


@pytest.mark.parametrize("paper, field, detail", ACLSUM_WRONG_TYPES)
def test_an_aclsum_field_of_the_wrong_type_is_named_with_its_type(tmp_path, paper, field, detail):
    folder = _aclsum(tmp_path / "papers", paper)
    error = refusal(folder, "aclsum")
    assert (error.path, error.line, error.field, error.reason) == (str(folder / "bad.json"), 1, field, errors.WRONG_TYPE)
    assert str(error) == f"{folder / 'bad.json'}, line 1, field '{field}': {detail} [wrong_type]"


def test_an_aclsum_paragraph_without_a_section_name_is_still_read(tmp_path):
    paper = _paper()
    paper["pdf_parse"]["body_text"][0].update(section=None, sec_num=None)
    (tmp_path / "p.json").write_text(json.dumps(paper))
    assert [unit.text for unit in next(read_examples(tmp_path / "p.json", "aclsum")).units] == ["The quick brown fox."]


# --------------------------------------------------------------------------- malformed JSON: the right place


@pytest.mark.parametrize("line, detail", [
    ('{"id": "b", "summary": "x"', "Expecting ',' delimiter at column 27, the end of the line"),
    ('{"id": "b" "summary": "x"}', "Expecting ',' delimiter at column 12"),
])
def test_malformed_json_names_the_column_on_the_bad_line(tmp_path, line, detail):
    path = _jsonl(tmp_path, GOOD, line, GOOD.replace('"a"', '"c"'))
    error = refusal(path, "jsonl")
    assert (error.line, error.reason) == (2, errors.MALFORMED_JSON)
    assert str(error) == f"{path}, line 2: malformed JSON: {detail} [malformed_json]"


def test_malformed_json_in_an_aclsum_paper_names_its_line_in_the_file(tmp_path):
    path = tmp_path / "paper.json"
    path.write_text('{\n  "abstract": "A.",\n  "pdf_parse": {"body_text": []\n}\n')
    error = refusal(path, "aclsum")
    assert (error.line, error.reason) == (4, errors.MALFORMED_JSON)
    assert "at column 2, the end of the line" in str(error)


# --------------------------------------------------------------------------- ids: one example each


def test_an_id_given_twice_in_a_split_is_an_error_naming_both_lines(tmp_path):
    path = _jsonl(tmp_path, GOOD, GOOD.replace('"a"', '"c"'), GOOD)
    error = refusal(path, "jsonl")
    assert (error.line, error.field, error.reason) == (3, "id", errors.DUPLICATE_ID)
    assert str(error) == f"{path}, line 3, field 'id': example id 'a' is already given on line 1 [duplicate_id]"


def test_the_same_id_in_two_splits_is_not_a_duplicate(tmp_path):
    (tmp_path / "train").mkdir(), (tmp_path / "test").mkdir()
    assert [e.id for split in ("train", "test") for e in read_examples(_jsonl(tmp_path / split, GOOD), "jsonl")] \
        == ["a", "a"]


# --------------------------------------------------------------------------- pagesum-preprocess


@pytest.fixture(scope="module")
def gpt2_args(tmp_path_factory):
    bpe = build_gpt2_bpe(tmp_path_factory.mktemp("bpe"))
    return ["--tokenizer", "gpt2", "--gpt2-encoder-json", bpe.encoder_json, "--gpt2-vocab-bpe", bpe.vocab_bpe,
            "--gpt2-dict", bpe.dict_txt, "--no-progress"]


def _run(*args) -> int:
    return main([str(a) for a in args])


def _errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]


@pytest.mark.parametrize("skip_invalid", [[], ["--skip-invalid"]])
def test_mismatched_multinews_files_stop_the_run_saying_they_cannot_be_skipped(tmp_path, gpt2_args, caplog,
                                                                               skip_invalid):
    (tmp_path / "test.src.txt").write_text("one story .\ntwo story .\n")
    (tmp_path / "test.tgt.txt").write_text("a summary .\n")
    with caplog.at_level(logging.ERROR):
        assert _run("--input-format", "multinews", "--testpref", tmp_path / "test.src.txt", "--destdir",
                    tmp_path / "d", *skip_invalid, *gpt2_args) == 1
    assert _errors(caplog) == [
        f"{tmp_path / 'test.src.txt'}, line 2: test.src.txt and test.tgt.txt have different numbers of lines "
        f"(test.tgt.txt ends at line 1); which lines pair up is unknown, so this cannot be skipped [mismatched_files]"]
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("paper, field, detail", ACLSUM_WRONG_TYPES)
def test_an_aclsum_field_of_the_wrong_type_stops_the_run_in_one_line(tmp_path, gpt2_args, caplog, paper, field,
                                                                     detail):
    folder = _aclsum(tmp_path / "papers", paper)
    with caplog.at_level(logging.ERROR):
        assert _run("--input-format", "aclsum", "--trainpref", folder, "--destdir", tmp_path / "d", *gpt2_args) == 1
    assert _errors(caplog) == [f"{folder / 'bad.json'}, line 1, field '{field}': {detail} [wrong_type] "
                               f"({SKIP_HINT} to skip such examples)"]
    assert not (tmp_path / "d").exists()


def test_skip_invalid_skips_and_counts_aclsum_papers_with_fields_of_the_wrong_type(tmp_path, gpt2_args, caplog):
    folder = tmp_path / "papers"
    folder.mkdir()
    (folder / "good.json").write_text(json.dumps(PAPER))
    for i, (paper, _, _) in enumerate(ACLSUM_WRONG_TYPES):
        (folder / f"bad{i}.json").write_text(json.dumps(paper))
    with caplog.at_level(logging.WARNING):
        assert _run("--input-format", "aclsum", "--trainpref", folder, "--destdir", tmp_path / "d", "--skip-invalid",
                    *gpt2_args) == 0
    stats = CorpusMeta.load(tmp_path / "d").stats["train"]
    assert stats["examples"] == 1 and stats["skipped"] == {"wrong_type": 4}
    assert (tmp_path / "d" / "train.ids.txt").read_text() == "good\n"
    assert f"skipped: {folder / 'bad0.json'}, line 1, field 'pdf_parse.body_text[0].section'" in caplog.text


def test_a_duplicate_id_stops_the_run_and_leaves_nothing_behind(tmp_path, gpt2_args, caplog):
    path = _jsonl(tmp_path, GOOD, GOOD.replace('"a"', '"c"'), GOOD)
    with caplog.at_level(logging.ERROR):
        assert _run("--input-format", "jsonl", "--trainpref", path, "--destdir", tmp_path / "d", *gpt2_args) == 1
    assert _errors(caplog) == [f"{path}, line 3, field 'id': example id 'a' is already given on line 1 "
                               f"[duplicate_id] ({SKIP_HINT} to skip such examples)"]
    assert not (tmp_path / "d").exists()


def test_skip_invalid_skips_and_counts_the_later_of_two_examples_with_one_id_and_the_other_refusals(
        tmp_path, gpt2_args, caplog):
    path = _jsonl(tmp_path, GOOD, GOOD.replace('"a"', '"c"'), GOOD,
                  '{"id": "d", "summary": "S.", "text": "The fox.", "documents": ["X y."]}',
                  '{"id": "e", "summary": "S.", "sections": [{"name": "A", "text": ""}]}',
                  '{"id": "f", "summary": "x"')
    with caplog.at_level(logging.WARNING):
        assert _run("--input-format", "jsonl", "--trainpref", path, "--destdir", tmp_path / "d", "--skip-invalid",
                    "--workers", 2, *gpt2_args) == 0
    stats = CorpusMeta.load(tmp_path / "d").stats["train"]
    assert stats["examples"] == 2 and stats["skipped"] == {
        "conflicting_fields": 1, "duplicate_id": 1, "empty_document": 1, "malformed_json": 1}
    assert (tmp_path / "d" / "train.ids.txt").read_text() == "a\nc\n"
    assert f"skipped: {path}, line 3, field 'id': example id 'a' is already given on line 1" in caplog.text
