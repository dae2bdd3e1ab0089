"""Tokenizers give exactly the symbols of fairseq's own BPE classes."""

import random

import numpy as np
import pytest
import regex
from fairseq.data import Dictionary
from fairseq.data.encoders.gpt2_bpe import GPT2BPE, GPT2BPEConfig
from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE, SentencepieceConfig

from builders.bpe import build_gpt2_bpe
from builders.corpora import acl_papers
from pagesum_plugin.corpus.sentences import split_sentences
from pagesum_plugin.corpus import tokenizers
from pagesum_plugin.corpus.tokenizers import ASCII_PIECES, build_dictionary, build_tokenizer, train_sentencepiece

TRICKY = [
    "  leading and  double  spaces\n\nnew\tlines and tabs  ",
    "don't it's we'll I'M they've",
    "Unicode: café naïve Zürich 東京 🙂 — “quotes”",
    "<|endoftext|> <s> </s> stay plain text",
    "",
]


@pytest.fixture(scope="module")
def texts():
    papers = acl_papers(6)
    return [p["summary"] for p in papers] + [s["text"] for p in papers for s in p["sections"]]


@pytest.fixture(scope="module")
def gpt2_files(tmp_path_factory, texts):
    return build_gpt2_bpe(tmp_path_factory.mktemp("bpe"), texts[::2], vocab_size=800)


def test_gpt2_symbols_equal_fairseq_gpt2_bpe(gpt2_files, texts):
    fairseq_bpe = GPT2BPE(GPT2BPEConfig(gpt2_encoder_json=str(gpt2_files.encoder_json),
                                        gpt2_vocab_bpe=str(gpt2_files.vocab_bpe)))
    ours = build_tokenizer("gpt2", encoder_json=gpt2_files.encoder_json, vocab_bpe=gpt2_files.vocab_bpe)
    for text in texts + TRICKY:  # half of the texts were not seen in BPE training
        assert ours.encode(text) == fairseq_bpe.encode(text).split(), text[:80]
        assert ours.decode(ours.encode(text)) == text
        assert fairseq_bpe.decode(" ".join(ours.encode(text))) == text


# GPT-2's pre-tokenization as its authors (and fairseq's gpt2_bpe_utils) wrote it, in Unicode classes
GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def ascii_noise(count: int, seed: int = 0) -> list:
    """Random ASCII strings over all 128 characters, control characters included, with spaces,
    newlines, apostrophes and letters frequent enough to form contractions and whitespace runs."""
    rng = random.Random(seed)
    alphabet = [chr(i) for i in range(128)]
    weights = [8 if c in " \n\t'" else 3 if c.isalnum() else 1 for c in alphabet]
    return ["".join(rng.choices(alphabet, weights, k=rng.randrange(40))) for _ in range(count)]


def test_ascii_pieces_cut_ascii_text_as_gpt2s_unicode_pattern(texts):
    ascii_texts = [text for text in texts + TRICKY if text.isascii()] + ascii_noise(5000)
    assert [ASCII_PIECES.findall(text) for text in ascii_texts] == [GPT2_PATTERN.findall(text) for text in ascii_texts]


def split_flat(flat, lengths) -> list:
    return [ids.tolist() for ids in np.split(flat, np.cumsum(lengths)[:-1])] if len(lengths) else []


def test_gpt2_encode_flat_equals_hf_tokenizers_on_whole_texts(gpt2_files, texts, monkeypatch):
    ours = build_tokenizer("gpt2", encoder_json=gpt2_files.encoder_json, vocab_bpe=gpt2_files.vocab_bpe)
    batch = [" " + text for text in texts] + texts + TRICKY + ascii_noise(3000)
    reference = ours.encode_ids_whole(batch)
    assert split_flat(*ours.encode_flat(batch)) == reference  # every piece new
    assert split_flat(*ours.encode_flat(batch)) == reference  # every piece remembered
    assert split_flat(*ours.encode_flat(batch[::-1])) == reference[::-1]
    assert split_flat(*ours.encode_flat([])) == []
    monkeypatch.setattr(tokenizers, "PIECE_CACHE_SIZE", 50)  # starts afresh at almost every text
    fresh = build_tokenizer("gpt2", encoder_json=gpt2_files.encoder_json, vocab_bpe=gpt2_files.vocab_bpe)
    assert [split_flat(*fresh.encode_flat([text]))[0] for text in batch] == reference
    assert len(fresh.pieces.rows) <= 50 + max(len(set(ASCII_PIECES.findall(text))) for text in batch)


def test_gpt2_encode_flat_encodes_each_distinct_piece_once(gpt2_files, monkeypatch):
    ours = build_tokenizer("gpt2", encoder_json=gpt2_files.encoder_json, vocab_bpe=gpt2_files.vocab_bpe)
    calls = []
    whole = ours.pieces.encode
    monkeypatch.setattr(ours.pieces, "encode", lambda batch: calls.append(sorted(batch)) or whole(batch))
    ours.encode_flat([" the cat", " the dog", "the cat sat"])
    assert calls == [sorted([" the", " cat", " dog", "the", " sat"])]
    ours.encode_flat([" the dog sat", " café au lait", " café au lait"])
    assert calls[1:] == [[" café au lait"]]  # nothing new in ASCII; a text with other characters is one piece


def test_gpt2_dictionary_is_barts_dict_file(gpt2_files):
    ours = build_tokenizer("gpt2", encoder_json=gpt2_files.encoder_json, vocab_bpe=gpt2_files.vocab_bpe)
    dictionary = build_dictionary(ours, gpt2_files.dict_txt)
    assert len(dictionary) == 4 + len(gpt2_files.dict_txt.read_text().splitlines())
    assert (dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()) == (0, 1, 2, 3)


def test_gpt2_decode_keeps_dictionary_specials_as_text(gpt2_files):
    ours = build_tokenizer("gpt2", encoder_json=gpt2_files.encoder_json, vocab_bpe=gpt2_files.vocab_bpe)
    assert ours.decode(ours.encode("a b") + ["<unk>"] + ours.encode(" c")) == "a b<unk> c"


@pytest.fixture(scope="module")
def spm_tokenizer(tmp_path_factory, texts):
    sentences = [s for text in texts for s in split_sentences(text)]
    return train_sentencepiece(sentences, tmp_path_factory.mktemp("spm") / "sentencepiece.model", vocab_size=500)


def test_sentencepiece_symbols_equal_fairseq_sentencepiece_bpe(spm_tokenizer, texts):
    fairseq_bpe = SentencepieceBPE(SentencepieceConfig(sentencepiece_model=str(spm_tokenizer.model_path)))
    for text in texts[:20] + TRICKY[:3]:
        symbols = spm_tokenizer.encode(text)
        assert symbols == fairseq_bpe.encode(text).split()
        assert spm_tokenizer.decode(symbols) == fairseq_bpe.decode(" ".join(symbols))


def test_sentencepiece_dictionary_holds_every_piece_the_model_emits(spm_tokenizer, texts, tmp_path):
    dictionary = build_dictionary(spm_tokenizer)
    dictionary.save(str(tmp_path / "dict.txt"))
    reloaded = Dictionary.load(str(tmp_path / "dict.txt"))
    assert len(reloaded) == len(dictionary) == 4 + 500 - 3  # spm's <unk>, <s>, </s> are the dictionary's own
    sp = spm_tokenizer.sp
    for text in texts + TRICKY:
        for symbol in spm_tokenizer.encode(text):
            # Only characters outside the model's coverage, which spm itself calls unknown,
            # map to the dictionary's <unk>.
            assert (reloaded.index(symbol) == reloaded.unk()) == sp.is_unknown(sp.piece_to_id(symbol)), symbol


def test_sentencepiece_training_is_reproducible(tmp_path, texts):
    sentences = [s for text in texts for s in split_sentences(text)]
    first = train_sentencepiece(sentences, tmp_path / "a.model", vocab_size=300)
    second = train_sentencepiece(sentences, tmp_path / "b.model", vocab_size=300)
    assert first.model_path.read_bytes() == second.model_path.read_bytes()
