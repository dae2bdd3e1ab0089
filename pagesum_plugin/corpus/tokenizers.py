"""Tokenizers that turn text into dictionary symbols, exactly as fairseq's BPE classes do.

* ``gpt2``: BART's byte-level BPE from a user's ``encoder.json`` and ``vocab.bpe``, run by
  HF ``tokenizers`` (Rust) with GPT-2's pre-tokenization. Symbols are GPT-2 ids written as
  decimal strings, which is what BART's ``dict.txt`` and fairseq's ``GPT2BPE`` use.
* ``sentencepiece``: a model trained on the training split; symbols are its pieces,
  which is what fairseq's ``SentencepieceBPE`` produces.

``encode_ids(texts)`` encodes a whole batch of texts in one call into the tokenizer's own
ids, and ``symbol(i)`` names id ``i`` as the dictionary spells it: the codec maps a batch's
ids to dictionary ids with one array lookup built from them.
"""

import os
import re
import shutil
from itertools import chain
from pathlib import Path
from typing import Iterable, Protocol

import sentencepiece as spm
from fairseq.data import Dictionary
from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

from .options import TOKENIZERS

# Each worker process runs one tokenizer; Rust threads inside forked workers would
# only compete with the workers for the same cores.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

GPT2_FILES = ("encoder.json", "vocab.bpe")
SENTENCEPIECE_FILE = "sentencepiece.model"

# GPT-2's pre-tokenization pattern (the one HF's ByteLevel pre-tokenizer and fairseq's encoder
# apply), spelled for ASCII text, where \p{L} is [A-Za-z], \p{N} is [0-9] and \s is
# [\t\n\v\f\r ]. Python's own ``re`` runs it about twice as fast as the Unicode pattern.
_SPACE = r"\t\n\x0b\x0c\r "
ASCII_PIECES = re.compile(rf"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^{_SPACE}A-Za-z0-9]+"
                          rf"|[{_SPACE}]+(?![^{_SPACE}])|[{_SPACE}]+")
PIECE_CACHE_SIZE = 200_000  # pieces remembered per process (a few tens of MB); then it starts afresh


class Tokenizer(Protocol):
    name: str
    vocab_size: int  # every id that encode_ids can return is below it

    def encode(self, text: str) -> list[str]: ...

    def encode_ids(self, texts: list[str]) -> list[list[int]]: ...

    def symbol(self, token_id: int) -> str: ...

    def decode(self, symbols: list[str]) -> str: ...

    def save(self, data_dir: str | Path) -> None: ...


class Gpt2Tokenizer:
    """GPT-2 byte-level BPE, identical in output to ``fairseq.data.encoders.gpt2_bpe``.

    BPE never merges across the pieces that pre-tokenization cuts, so a piece has the same
    ids wherever it occurs. ``encode_ids`` cuts ASCII texts itself (``ASCII_PIECES``) and
    encodes each distinct piece once, with HF ``tokenizers``, remembering it: on a long
    corpus almost every piece has been seen before, and a text costs one regex pass and
    one lookup per piece. Texts with other characters go to HF ``tokenizers`` whole.
    """

    name = "gpt2"

    def __init__(self, encoder_json: str | Path, vocab_bpe: str | Path):
        self.files = {"encoder.json": Path(encoder_json), "vocab.bpe": Path(vocab_bpe)}
        bpe = models.BPE.from_file(str(encoder_json), str(vocab_bpe))
        self._hf = HFTokenizer(bpe)
        # fairseq's encoder applies GPT-2's regex to the raw text, with no prefix space.
        self._hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        self._hf.decoder = decoders.ByteLevel()
        self.vocab_size = max(self._hf.get_vocab().values()) + 1
        self._pieces: dict[str, list[int]] = {}  # piece -> its ids

    def encode(self, text: str) -> list[str]:
        return [str(i) for i in self._hf.encode(text, add_special_tokens=False).ids]

    def encode_ids(self, texts: list[str]) -> list[list[int]]:
        pieces = [ASCII_PIECES.findall(text) if text.isascii() else None for text in texts]
        ids = [self._known(text_pieces) for text_pieces in pieces]  # None: a new piece, or not ASCII
        unseen = [i for i, text_pieces in enumerate(pieces) if text_pieces is not None and ids[i] is None]
        if unseen:
            self._remember(list(dict.fromkeys(piece for i in unseen for piece in pieces[i])))
            for i in unseen:
                ids[i] = self._known(pieces[i])
        whole = [i for i, text_pieces in enumerate(pieces) if text_pieces is None]
        for i, text_ids in zip(whole, self.encode_ids_whole([texts[i] for i in whole])):
            ids[i] = text_ids
        return ids

    def _known(self, pieces: list[str] | None) -> list[int] | None:
        """The ids of a text's pieces if every one of them is remembered, else None."""
        if pieces is None:
            return None
        try:
            return list(chain.from_iterable(map(self._pieces.__getitem__, pieces)))
        except KeyError:
            return None

    def _remember(self, needed: list[str]) -> None:
        """Makes every piece of ``needed`` known, starting afresh when the cache would grow too large."""
        new = [piece for piece in needed if piece not in self._pieces]
        if len(self._pieces) + len(new) > PIECE_CACHE_SIZE:
            self._pieces.clear()
            new = needed
        self._pieces.update(zip(new, self.encode_ids_whole(new)))

    def encode_ids_whole(self, texts: list[str]) -> list[list[int]]:
        """``encode_ids`` without the piece cache: HF ``tokenizers`` on every text whole."""
        # encode_batch_fast: the ids without the character offsets, which nothing here reads.
        return [encoding.ids for encoding in self._hf.encode_batch_fast(texts, add_special_tokens=False)]

    def symbol(self, token_id: int) -> str:
        return str(token_id)

    def decode(self, symbols: list[str]) -> str:
        # Dictionary specials such as "<unk>" have no GPT-2 id: they are kept as text.
        pieces, ids = [], []
        for symbol in symbols:
            if symbol.isdigit():
                ids.append(int(symbol))
                continue
            if ids:
                pieces.append(self._hf.decode(ids))
                ids = []
            pieces.append(symbol)
        if ids:
            pieces.append(self._hf.decode(ids))
        return "".join(pieces)

    def save(self, data_dir: str | Path) -> None:
        for name, source in self.files.items():
            target = Path(data_dir) / name
            if source.resolve() != target.resolve():
                shutil.copyfile(source, target)


class SentencePieceTokenizer:
    """A sentencepiece model, used as fairseq's ``SentencepieceBPE`` uses it."""

    name = "sentencepiece"

    def __init__(self, model: str | Path):
        self.model_path = Path(model)
        self.sp = spm.SentencePieceProcessor(model_file=str(model))
        self.vocab_size = self.sp.get_piece_size()

    def encode(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def encode_ids(self, texts: list[str]) -> list[list[int]]:
        # One thread: each preprocessing worker is one process on one core.
        return self.sp.encode(texts, num_threads=1)

    def symbol(self, token_id: int) -> str:
        # A character the model lacks is its unknown piece, which no dictionary holds: it
        # becomes <unk> there, as the surface string that ``encode`` returns for it does.
        return self.sp.id_to_piece(token_id)

    def decode(self, symbols: list[str]) -> str:
        # The same rule as fairseq's SentencepieceBPE.decode.
        return "".join(symbols).replace("\u2581", " ").strip()

    def save(self, data_dir: str | Path) -> None:
        target = Path(data_dir) / SENTENCEPIECE_FILE
        if self.model_path.resolve() != target.resolve():
            shutil.copyfile(self.model_path, target)

    def dictionary_symbols(self) -> list[str]:
        """Every piece the model can emit, i.e. all but spm's control and unknown pieces."""
        return [
            self.sp.id_to_piece(i)
            for i in range(self.sp.get_piece_size())
            if not (self.sp.is_control(i) or self.sp.is_unknown(i))
        ]


def build_tokenizer(name: str, **files) -> Tokenizer:
    """``build_tokenizer("gpt2", encoder_json=..., vocab_bpe=...)`` or
    ``build_tokenizer("sentencepiece", model=...)``."""
    if name == "gpt2":
        return Gpt2Tokenizer(files["encoder_json"], files["vocab_bpe"])
    if name == "sentencepiece":
        return SentencePieceTokenizer(files["model"])
    raise ValueError(f"unknown tokenizer {name!r}; choose from {TOKENIZERS}")


def load_tokenizer(data_dir: str | Path, name: str) -> Tokenizer:
    """The tokenizer ``name`` from the files a data directory holds."""
    data_dir = Path(data_dir)
    if name == "gpt2":
        return build_tokenizer(name, encoder_json=data_dir / "encoder.json", vocab_bpe=data_dir / "vocab.bpe")
    if name == "sentencepiece":
        return build_tokenizer(name, model=data_dir / SENTENCEPIECE_FILE)
    raise ValueError(f"{data_dir} holds ids without a tokenizer ({name!r}): text cannot be encoded or decoded")


def train_sentencepiece(sentences: Iterable[str], model_path: str | Path, vocab_size: int,
                        max_sentences: int = 2_000_000) -> SentencePieceTokenizer:
    """Train a unigram sentencepiece model on ``sentences`` and write it to ``model_path``.

    Training is made reproducible by a fixed sampling seed and by a single thread for
    the EM steps whose float sums would otherwise depend on thread scheduling.
    """
    spm.set_random_generator_seed(1)
    with open(model_path, "wb") as model:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            vocab_size=vocab_size,
            model_type="unigram",
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            num_threads=1,
            # The dictionary holds <s>, <pad>, </s>, <unk> itself; spm keeps its defaults.
            minloglevel=2,
        )
    return SentencePieceTokenizer(model_path)


def build_dictionary(tokenizer: Tokenizer, gpt2_dict: str | Path | None = None):
    """The fairseq ``Dictionary`` for ``tokenizer``: BART's ``dict.txt`` for gpt2,
    or one symbol per sentencepiece piece."""
    if tokenizer.name == "gpt2":
        if gpt2_dict is None:
            raise ValueError("the gpt2 tokenizer needs BART's dict.txt (--gpt2-dict)")
        return Dictionary.load(str(gpt2_dict))
    dictionary = Dictionary()
    for piece in tokenizer.dictionary_symbols():
        dictionary.add_symbol(piece, n=0)
    return dictionary
