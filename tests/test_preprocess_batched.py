"""Batched encoding writes the same data directory, byte for byte, as encoding one sentence
at a time: every input format, both tokenizers, and the aclsum papers.

The reference below is the per-sentence definition of the stored corpus: each sentence
encoded after a space, its first word encoded with and without one, a section name with its
colon, the summary with its whitespace collapsed, every symbol looked up in the dictionary.
"""

import json

import numpy as np
import pytest

from builders.bpe import build_gpt2_bpe
from builders.corpora import acl_papers, copy_acl_papers, write_cohan, write_govreport, write_jsonl, write_multinews
from pagesum_plugin.corpus.codec import TextCodec
from pagesum_plugin.corpus.format import EncodedDocument
from pagesum_plugin.corpus.readers import read_examples
from pagesum_preprocess.cli import main

# Whitespace, contractions, unicode and punctuation at the start of a sentence's first word:
# where a leading space changes more than the first token.
TRICKY_TEXT = ("'s and 'll open it. (Smith et al. 2020) follow.\u00a0Then\ta tab.  Double  spaces. "
               "\u201cQuoted\u201d words. 3.5% of 東京 🙂 caf\u00e9s. -- dashes -- lead. ...and dots.\n\n"
               "A second paragraph\u2028with a line separator. don't stop. I'M LOUD.")


def _reference_ids(codec: TextCodec, text: str) -> np.ndarray:
    return np.array([codec.dictionary.index(symbol) for symbol in codec.tokenizer.encode(text)], dtype=np.int64)


def _reference_head(codec: TextCodec, sentence: str) -> tuple:
    if codec.tokenizer.name == "sentencepiece":
        return np.zeros(0, dtype=np.int64), 0
    word = sentence.split(maxsplit=1)[0]
    spaced, plain = _reference_ids(codec, " " + word), _reference_ids(codec, word)
    shared = 0
    while shared < min(len(spaced), len(plain)) and spaced[len(spaced) - 1 - shared] == plain[len(plain) - 1 - shared]:
        shared += 1
    return plain[: len(plain) - shared], len(spaced) - shared


def _reference_document(codec: TextCodec, example) -> EncodedDocument | None:
    units, heads, names, unit_length, unit_group, head_spaced, head_plain, name_length = ([] for _ in range(8))
    for unit in example.units:
        sentences = unit.sentence_list()
        if not sentences:
            continue
        group = len(name_length)
        name = _reference_ids(codec, f"{unit.name}:") if unit.name else np.zeros(0, dtype=np.int64)
        names.append(name)
        name_length.append(len(name))
        for sentence in sentences:
            spaced = _reference_ids(codec, " " + sentence)
            head, replaced = _reference_head(codec, sentence)
            units.append(spaced), heads.append(head), unit_length.append(len(spaced)), unit_group.append(group)
            head_spaced.append(replaced), head_plain.append(len(head))
    if not units:
        return None
    concat = lambda parts: np.concatenate(parts).astype(np.int64)  # noqa: E731
    return EncodedDocument(units=concat(units), heads=concat(heads), names=concat(names),
                           unit_length=np.array(unit_length), unit_group=np.array(unit_group),
                           head_spaced=np.array(head_spaced), head_plain=np.array(head_plain),
                           name_length=np.array(name_length))


def reference_encode_examples(codec: TextCodec, examples: list) -> list:
    return [(_reference_document(codec, example), _reference_ids(codec, " ".join(example.summary.split())))
            for example in examples]


@pytest.fixture(scope="module")
def papers():
    return acl_papers(4, offset=20)


@pytest.fixture(scope="module")
def gpt2_args(tmp_path_factory, papers):
    texts = [p["summary"] for p in papers] + [s["text"] for p in papers for s in p["sections"]]
    bpe = build_gpt2_bpe(tmp_path_factory.mktemp("bpe"), texts[::2], vocab_size=600, leave_out_of_dict=20)
    return ["--tokenizer", "gpt2", "--gpt2-encoder-json", bpe.encoder_json, "--gpt2-vocab-bpe", bpe.vocab_bpe,
            "--gpt2-dict", bpe.dict_txt]


def _files(directory) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _preprocess_both_ways(monkeypatch, tmp_path, tokenizer_args, *args) -> tuple[dict, dict]:
    """The data directory written with batched encoding, and with the per-sentence reference."""
    command = [*args, *tokenizer_args, "--no-progress", "--workers", "1"]
    assert main([str(a) for a in command] + ["--destdir", str(tmp_path / "batched")]) == 0
    with monkeypatch.context() as patch:
        patch.setattr(TextCodec, "encode_examples", reference_encode_examples)
        assert main([str(a) for a in command] + ["--destdir", str(tmp_path / "reference")]) == 0
    return _files(tmp_path / "batched"), _files(tmp_path / "reference")


def _tricky_jsonl(path):
    rows = [{"id": "tricky-text", "summary": "'s summary\u00a0here. Done.", "text": TRICKY_TEXT},
            {"id": "tricky-sections", "summary": "S.", "sections": [{"name": "(Intro", "text": TRICKY_TEXT},
                                                                    {"name": "", "text": "untitled  section."}]}]
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


CORPORA = {
    "jsonl-sections": ("jsonl", lambda d, p: write_jsonl(d / "c.jsonl", p, "sections")),
    "jsonl-documents": ("jsonl", lambda d, p: write_jsonl(d / "c.jsonl", p, "documents")),
    "jsonl-text": ("jsonl", lambda d, p: write_jsonl(d / "c.jsonl", p, "text")),
    "jsonl-tricky": ("jsonl", lambda d, p: _tricky_jsonl(d / "c.jsonl")),
    "arxiv": ("arxiv", lambda d, p: write_cohan(d / "c.txt", p)),
    "pubmed": ("pubmed", lambda d, p: write_cohan(d / "c.txt", p)),
    "govreport-sections": ("govreport", lambda d, p: write_govreport(d / "c.jsonl", p, "sections")),
    "govreport-plain": ("govreport", lambda d, p: write_govreport(d / "c.jsonl", p, "plain")),
    "multinews-src-tgt": ("multinews", lambda d, p: write_multinews(d / "mn", p)),
    "multinews-jsonl": ("multinews", lambda d, p: write_multinews(d / "mn", p, variant="jsonl")),
    "aclsum": ("aclsum", lambda d, p: copy_acl_papers(d / "papers", 4, offset=20)),
}


@pytest.mark.parametrize("tokenizer", ["gpt2", "sentencepiece"])
@pytest.mark.parametrize("corpus", CORPORA)
def test_batched_encoding_writes_the_reference_bytes(monkeypatch, tmp_path, papers, gpt2_args, corpus, tokenizer):
    input_format, write = CORPORA[corpus]
    source = write(tmp_path, papers)
    vocab_size = 60 if corpus == "jsonl-tricky" else 300  # the most pieces two short examples give
    tokenizer_args = gpt2_args if tokenizer == "gpt2" else ["--tokenizer", "sentencepiece", "--vocab-size", vocab_size]
    batched, reference = _preprocess_both_ways(monkeypatch, tmp_path, tokenizer_args, "--input-format", input_format,
                                               "--trainpref", source, "--locality", "discourse")
    assert batched.keys() == reference.keys()
    assert [name for name in batched if batched[name] != reference[name]] == []


def test_one_call_encodes_every_text_of_a_batch(monkeypatch, papers, gpt2_args, tmp_path):
    assert main([str(a) for a in ["--input-format", "jsonl", "--trainpref", write_jsonl(tmp_path / "c.jsonl", papers),
                                  "--destdir", tmp_path / "data", *gpt2_args, "--no-progress"]]) == 0
    codec = TextCodec.from_data_dir(tmp_path / "data")
    calls = []
    encode_flat = codec.tokenizer.encode_flat
    monkeypatch.setattr(codec.tokenizer, "encode_flat", lambda texts: calls.append(len(texts)) or encode_flat(texts))
    examples = list(read_examples(tmp_path / "c.jsonl", "jsonl"))
    encoded = codec.encode_examples(examples)
    sentences = sum(len(unit.sentence_list()) for example in examples for unit in example.units)
    assert len(calls) == 1 and calls[0] > sentences + len(examples)
    assert [document.units.tolist() for document, _ in encoded] == \
        [codec.encode_document(example).units.tolist() for example in examples]


@pytest.mark.slow
def test_batched_encoding_of_every_aclsum_paper_writes_the_reference_bytes(monkeypatch, tmp_path, gpt2_args):
    source = copy_acl_papers(tmp_path / "papers", 250)
    batched, reference = _preprocess_both_ways(monkeypatch, tmp_path, gpt2_args, "--input-format", "aclsum",
                                               "--trainpref", source, "--locality", "spatial", "--skip-invalid")
    assert batched.keys() == reference.keys()
    assert [name for name in batched if batched[name] != reference[name]] == []


def test_the_first_bad_record_in_input_order_stops_the_run(tmp_path, gpt2_args, caplog):
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "summary": "S.", "text": "T."}\n{"id": "b", "summary": "S.", "text": " "}\n'
                    '{not json\n', encoding="utf-8")
    assert main([str(a) for a in ["--input-format", "jsonl", "--trainpref", path, "--destdir", tmp_path / "d",
                                  *gpt2_args, "--no-progress"]]) == 1
    assert f"{path}, line 2" in caplog.text and "line 3" not in caplog.text
