"""Writers of small corpora in each native dataset format, made from real text.

The text comes from the ACL papers (S2ORC JSON) that the ``aclsum`` package ships, so
fixtures exercise real sentences, section names and abstracts. Each writer turns
papers into one dataset's exact layout:

* ``write_jsonl``: the generic format (sections, documents or plain text);
* ``write_cohan``: arXiv / PubMed (Cohan et al., 2018);
* ``write_govreport``: GovReport with ``document_sections`` or the plain layout;
* ``write_multinews``: Multi-News ``.src``/``.tgt`` or its JSON-lines variant;
* ``copy_acl_papers``: aclsum's own S2ORC files;

and ``refusal``, the ``InputError`` that reading a bad split raises.
"""

import json
import shutil
from pathlib import Path

import aclsum
import pytest

from pagesum_plugin.corpus.errors import InputError
from pagesum_plugin.corpus.readers import read_examples
from pagesum_plugin.corpus.sentences import split_sentences
from pagesum_preprocess.cli import main as preprocess_main

PAPER_DIR = Path(aclsum.__file__).parent / "dataset" / "paper_jsons"


def acl_paper_paths(n: int, offset: int = 0) -> list[Path]:
    return sorted(PAPER_DIR.glob("*.json"))[offset: offset + n]


def acl_papers(n: int, offset: int = 0) -> list[dict]:
    """``n`` real papers as ``{"id", "summary", "sections": [{"name", "text"}]}``."""
    papers = []
    for path in acl_paper_paths(n, offset):
        raw = json.loads(path.read_text(encoding="utf-8"))
        sections: list[dict] = []
        for paragraph in raw["pdf_parse"]["body_text"]:
            name = paragraph.get("section") or ""
            if not sections or sections[-1]["name"] != name:
                sections.append({"name": name, "text": paragraph["text"]})
            else:
                sections[-1]["text"] += "\n" + paragraph["text"]
        papers.append({"id": path.stem, "summary": raw["abstract"], "sections": sections})
    return papers


def _sentences(text: str) -> list[str]:
    return split_sentences(text)


def _write_lines(path: Path, objects: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for obj in objects:
            out.write(json.dumps(obj, ensure_ascii=False) + "\n")
    return path


def write_jsonl(path: str | Path, papers: list[dict], layout: str = "sections") -> Path:
    """Generic format. ``layout``: "sections", "documents" (sections as the documents of
    a cluster) or "text" (the sections joined into one plain document)."""
    rows = []
    for paper in papers:
        row = {"id": paper["id"], "summary": paper["summary"]}
        if layout == "sections":
            row["sections"] = paper["sections"]
        elif layout == "documents":
            row["documents"] = [s["text"] for s in paper["sections"]]
        else:
            row["text"] = "\n\n".join(s["text"] for s in paper["sections"])
        rows.append(row)
    return _write_lines(Path(path), rows)


def write_cohan(path: str | Path, papers: list[dict]) -> Path:
    """arXiv / PubMed layout: pre-split sentences, ``<S>``-tagged abstract sentences."""
    rows = []
    for paper in papers:
        sections = [_sentences(s["text"]) for s in paper["sections"]]
        rows.append({
            "article_id": paper["id"],
            "article_text": [sentence for section in sections for sentence in section],
            "abstract_text": [f"<S> {s} </S>" for s in _sentences(paper["summary"])],
            "labels": None,
            "section_names": [s["name"] for s in paper["sections"]],
            "sections": sections,
        })
    return _write_lines(Path(path), rows)


def write_govreport(path: str | Path, papers: list[dict], layout: str = "sections") -> Path:
    """GovReport. "sections": each paper section becomes a depth-1 section whose second
    half is a depth-2 subsection; "plain": ``document``/``summary`` strings."""
    rows = []
    for paper in papers:
        if layout == "plain":
            document = "\n".join(s["text"] for s in paper["sections"])
            rows.append({"id": paper["id"], "document": document, "summary": paper["summary"]})
            continue
        titles, paragraphs, depths = [], [], []
        for section in paper["sections"]:
            lines = section["text"].split("\n")
            half = max(1, len(lines) // 2)
            titles += [section["name"], f"{section['name']} (details)"]
            paragraphs += ["\n".join(lines[:half]), "\n".join(lines[half:])]
            depths += [1, 2]
        rows.append({
            "id": paper["id"],
            "document_sections": {"title": titles, "paragraphs": paragraphs, "depth": depths},
            "summary_sections": {"title": ["Summary"], "paragraphs": [paper["summary"]]},
        })
    return _write_lines(Path(path), rows)


def write_multinews(directory: str | Path, papers: list[dict], split: str = "train",
                    variant: str = "src_tgt") -> Path:
    """Multi-News, with each paper's sections as the cluster's documents.

    "src_tgt": ``{split}.src`` (documents joined by ``story_separator_special_tag``,
    newlines written as ``NEWLINE_CHAR``) and ``{split}.tgt``; returns the .src path.
    "jsonl": ``{split}.jsonl`` with ``document`` joined by ``|||||`` and ``summary``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    clusters = [[s["text"] for s in paper["sections"]] for paper in papers]
    if variant == "jsonl":
        rows = [{"document": " ||||| ".join(docs), "summary": paper["summary"]}
                for docs, paper in zip(clusters, papers)]
        return _write_lines(directory / f"{split}.jsonl", rows)
    source, target = directory / f"{split}.src", directory / f"{split}.tgt"
    source.write_text("".join(
        " story_separator_special_tag ".join(d.replace("\n", " NEWLINE_CHAR ") for d in docs) + "\n"
        for docs in clusters), encoding="utf-8")
    target.write_text("".join("– " + p["summary"].replace("\n", " ") + "\n" for p in papers), encoding="utf-8")
    return source


def copy_acl_papers(directory: str | Path, n: int, offset: int = 0) -> Path:
    """aclsum's S2ORC files, one paper per ``.json`` file, in ``directory``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for path in acl_paper_paths(n, offset):
        shutil.copyfile(path, directory / path.name)
    return directory


def paged_sentencepiece_data(jsonl_path: str | Path, data_dir: str | Path, vocab_size: int = 500) -> str:
    """``pagesum-preprocess`` of a jsonl file into discourse pages with a small sentencepiece
    vocabulary (the file serves as both train and test split)."""
    status = preprocess_main(["--input-format", "jsonl", "--trainpref", str(jsonl_path), "--testpref", str(jsonl_path),
                              "--tokenizer", "sentencepiece", "--vocab-size", str(vocab_size), "--locality", "discourse",
                              "--destdir", str(data_dir), "--no-progress"])
    assert status == 0
    return str(data_dir)


def refusal(path, input_format: str) -> InputError:
    """The ``InputError`` that reading the split at ``path`` raises (the test fails without one)."""
    with pytest.raises(InputError) as caught:
        list(read_examples(path, input_format))
    return caught.value
