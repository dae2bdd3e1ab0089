"""The demo's data (recipes/demo_data.py): the papers split by file name with the summary to learn
and their abstracts beside them, and a copying corpus whose every summary is the opening of its
one page."""

import json

import pytest

from pagesum_recipes import demo_data


def test_an_opening_is_whole_sentences_up_to_the_word_limit():
    text = "One two three. Four five six. Seven eight nine ten."
    assert demo_data.opening(text, max_words=6) == "One two three. Four five six."
    assert demo_data.opening(text, max_words=7) == "One two three. Four five six."
    assert demo_data.opening("A first sentence that is far too long.", max_words=3) == "A first sentence"


def test_the_extract_is_the_opening_most_like_the_abstract():
    pages = ["We thank the reviewers. Funding came from a grant.",
             "We parse malware reports into a database. It has many tables.",
             "Results are in Table 2."]
    index, text = demo_data.extract(pages, "A database of parsed malware reports.")
    assert index == 1 and text == "We parse malware reports into a database. It has many tables."
    assert demo_data.extract(["Same text.", "Same text."], "Same text.")[0] == 0  # a tie: the first page


def test_a_summary_of_another_kind_is_refused_in_one_line():
    with pytest.raises(ValueError, match="--summary must be extract, title or a number of sentences, got 'abstract'"):
        demo_data.summary_of(["A page."], "An abstract.", "A title", "abstract")
    assert demo_data.summary_of(["A page."], "First one. Second one.", "A title", "1") == "First one."
    assert demo_data.summary_of(["A page."], "An abstract.", " A title ", "title") == "A title"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    counts = demo_data.write(root / "papers", root / "copy", "extract", max_pages=8)
    read = {}
    for folder, names in (("papers", ("train", "valid", "test")), ("copy", demo_data.COPY_SPLITS)):
        for name in names:
            lines = (root / folder / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
            read[folder, name] = [json.loads(line) for line in lines]
    return root, counts, read


def test_the_papers_are_split_200_25_25_with_their_abstracts_in_order(written):
    root, counts, read = written
    assert [counts[s] for s in ("train", "valid", "test")] == [200, 25, 25]
    ids = {split: [p["id"] for p in read["papers", split]] for split in ("train", "valid", "test")}
    assert ids["test"] == sorted(ids["test"]) and not set(ids["train"]) & set(ids["test"])
    for split in ("train", "valid", "test"):
        abstracts = (root / "papers" / f"{split}.abstract.txt").read_text(encoding="utf-8").splitlines()
        assert len(abstracts) == len(ids[split]) and all(a.strip() for a in abstracts)
    for paper in read["papers", "test"]:
        pages = [s["text"] for s in paper["sections"]]
        assert 1 <= len(pages) <= 8 and all(s["name"] == "" for s in paper["sections"])  # pages open with their text
        assert paper["summary"] in [demo_data.opening(p) for p in pages]  # the extract is one page's opening


def test_every_copying_example_is_one_page_that_opens_with_its_summary(written):
    _, counts, read = written
    for split in demo_data.COPY_SPLITS:
        examples = read["copy", split]
        assert len(examples) == counts[f"copy {split}"] > 0
        for example in examples:
            (page,) = example["sections"]
            assert example["summary"] == demo_data.opening(page["text"]) and page["name"] == ""
            assert " ".join(page["text"].split()).startswith(" ".join(example["summary"].split()[:3]))
    root = written[0]
    assert sorted(p.name for p in (root / "copy").iterdir()) == [f"{s}.jsonl" for s in demo_data.COPY_SPLITS]
    copied = {e["id"].split("#")[0] for split in demo_data.COPY_SPLITS for e in read["copy", split]}
    assert copied == {p["id"] for split in demo_data.COPY_SPLITS for p in read["papers", split]}  # never the test papers


def test_the_command_refuses_a_summary_of_another_kind_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        demo_data.main([str(tmp_path / "papers"), str(tmp_path / "copy"), "--summary", "abstract"])
    assert stop.value.code == "pagesum-demo-data: --summary must be extract, title or a number of sentences, got 'abstract'"


def test_max_pages_keeps_each_papers_first_sections(written, tmp_path):
    assert demo_data.main([str(tmp_path / "papers"), str(tmp_path / "copy"), "--max-pages", "2"]) == 0
    lines = (tmp_path / "papers" / "test.jsonl").read_text(encoding="utf-8").splitlines()
    cut = [[s["text"] for s in json.loads(line)["sections"]] for line in lines]
    whole = [[s["text"] for s in paper["sections"]] for paper in written[2]["papers", "test"]]
    assert [pages[:2] for pages in whole] == cut and max(len(pages) for pages in whole) > 2
