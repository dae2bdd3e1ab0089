"""Tokenizers give exactly the symbols of fairseq's own BPE classes."""

import pytest
from fairseq.data import Dictionary
from fairseq.data.encoders.gpt2_bpe import GPT2BPE, GPT2BPEConfig
from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE, SentencepieceConfig

from builders.bpe import build_gpt2_bpe
from builders.corpora import acl_papers
from pagesum_plugin.corpus.sentences import split_sentences
from pagesum_plugin.corpus.tokenizers import build_dictionary, build_tokenizer, train_sentencepiece

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
