"""Migration: every page view of the stored corpus gives exactly the token ids that the
format-1 preprocessor wrote for the same settings.

``fixtures/v1_pages.json`` holds, for 12 aclsum papers, a hash of every page and summary
that the format-1 ``pagesum-preprocess`` wrote (one paging per locality, at preprocessing
time) with each tokenizer. Here the same papers are preprocessed once per tokenizer into
sentence units, and every locality is read back through its view.

Byte-level BPE runs use section text whose whitespace is already single spaces: the one
whitespace rule (units joined by one space) is the only intended difference between the
formats. Sentencepiece normalizes whitespace itself, so those runs use the raw papers.
"""

import hashlib
import json
import re
from pathlib import Path

import pytest

from builders.bpe import build_gpt2_bpe
from builders.corpora import acl_paper_paths, acl_papers
from pagesum_plugin.corpus.format import CorpusMeta
from pagesum_plugin.corpus.storage import CorpusSplit, load_dictionary
from pagesum_plugin.corpus.views import ViewConfig, assemble_pages
from pagesum_plugin.data.paged_dataset import summary_target
from pagesum_preprocess import cli

GOLDEN = json.loads((Path(__file__).parent / "fixtures" / "v1_pages.json").read_text())
LOCALITIES = ("spatial", "discourse", "document")
VIEW_FLAGS = {  # the format-1 settings of each run, now the view's settings
    "spatial": ViewConfig("spatial", num_pages=4, max_page_tokens=96, spatial_split="even"),  # format 1's rule
    "discourse": ViewConfig("discourse", max_pages=6, max_page_tokens=96),
    "document": ViewConfig("document", max_pages=5, max_page_tokens=96),
}
MAX_SUMMARY_TOKENS = 64


def _sha(ids) -> str:
    return hashlib.sha1(",".join(map(str, ids)).encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """{tokenizer: data directory}, each preprocessed once."""
    root = tmp_path_factory.mktemp("migration")
    papers = acl_papers(len(GOLDEN["papers"]))
    assert [p["id"] for p in papers] == GOLDEN["papers"]
    spaces = re.compile(r"\s+")
    jsonl = root / "papers.jsonl"
    with open(jsonl, "w", encoding="utf-8") as out:
        for paper in papers:
            sections = [{"name": s["name"], "text": spaces.sub(" ", s["text"]).strip()} for s in paper["sections"]]
            sections = [s for s in sections if s["text"]]
            out.write(json.dumps({"id": paper["id"], "summary": paper["summary"], "sections": sections}) + "\n")
    aclsum_dir = root / "aclsum"
    aclsum_dir.mkdir()
    for path in acl_paper_paths(len(GOLDEN["papers"])):
        (aclsum_dir / path.name).write_bytes(path.read_bytes())
    texts = [p["summary"] for p in papers] + [s["text"] for p in papers for s in p["sections"]]
    bpe = build_gpt2_bpe(root / "bpe", texts, vocab_size=600)
    inputs = {
        "gpt2": ["--input-format", "jsonl", "--trainpref", str(jsonl), "--testpref", str(jsonl), "--tokenizer", "gpt2",
                 "--gpt2-encoder-json", str(bpe.encoder_json), "--gpt2-vocab-bpe", str(bpe.vocab_bpe),
                 "--gpt2-dict", str(bpe.dict_txt)],
        "sentencepiece": ["--input-format", "aclsum", "--trainpref", str(aclsum_dir), "--testpref", str(aclsum_dir),
                          "--tokenizer", "sentencepiece", "--vocab-size", "500"],
    }
    out = {}
    for tokenizer, flags in inputs.items():
        out[tokenizer] = root / tokenizer
        assert cli.main([*flags, "--max-summary-tokens", str(MAX_SUMMARY_TOKENS), "--no-progress",
                         "--destdir", str(out[tokenizer])]) == 0
    return out


def _read(data_dir: Path, view: ViewConfig):
    dictionary = load_dictionary(data_dir)
    corpus = CorpusSplit(data_dir, "test")
    bos, eos = dictionary.bos(), dictionary.eos()
    examples = []
    for i in range(len(corpus)):
        pages = assemble_pages(corpus.document(i), view, bos, eos)
        summary = summary_target(corpus.summary(i), bos, eos, MAX_SUMMARY_TOKENS)
        examples.append({"pages": [_sha(p.tolist()) for p in pages], "page_lengths": [len(p) for p in pages],
                         "summary": _sha(summary.tolist())})
    return examples


@pytest.mark.parametrize("tokenizer", ["gpt2", "sentencepiece"])
def test_the_vocabulary_is_the_one_format_1_used(corpora, tokenizer):
    digest = hashlib.sha1((corpora[tokenizer] / "dict.txt").read_bytes()).hexdigest()[:16]
    assert all(GOLDEN["runs"][f"{tokenizer}/{locality}"]["vocabulary"] == digest for locality in LOCALITIES)


@pytest.mark.parametrize("locality", LOCALITIES)
@pytest.mark.parametrize("tokenizer", ["gpt2", "sentencepiece"])
def test_each_view_gives_the_pages_and_summaries_format_1_wrote(corpora, tokenizer, locality):
    expected = GOLDEN["runs"][f"{tokenizer}/{locality}"]["examples"]
    assert _read(corpora[tokenizer], VIEW_FLAGS[locality]) == expected


def test_one_corpus_serves_every_locality_without_preprocessing_again(corpora):
    meta = CorpusMeta.load(corpora["gpt2"])
    assert meta.view == "spatial" and meta.splits == ["train", "test"]
