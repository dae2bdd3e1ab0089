"""Tokenizers that turn text into dictionary symbols, exactly as fairseq's BPE classes do.

* ``gpt2``: BART's byte-level BPE from a user's ``encoder.json`` and ``vocab.bpe``, run by
  HF ``tokenizers`` (Rust) with GPT-2's pre-tokenization. Symbols are GPT-2 ids written as
  decimal strings, which is what BART's ``dict.txt`` and fairseq's ``GPT2BPE`` use.
* ``sentencepiece``: a model trained on the training split; symbols are its pieces,
  which is what fairseq's ``SentencepieceBPE`` produces.

``encode_flat(texts)`` encodes a whole batch of texts in one call into the tokenizer's own
ids, every text's concatenated, and ``symbol(i)`` names id ``i`` as the dictionary spells it:
the codec maps a batch's ids to dictionary ids with one array lookup built from them.
"""

import os
import re
import shutil
from itertools import chain
from pathlib import Path
from typing import Iterable, Protocol

import numpy as np
import sentencepiece as spm
from fairseq.data import Dictionary
from tokenizers import Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

from .format import GPT2_ENCODER_FILE, GPT2_MERGES_FILE, SENTENCEPIECE_FILE
from .options import TOKENIZERS

# Each worker process runs one tokenizer; Rust threads inside forked workers would
# only compete with the workers for the same cores.
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# GPT-2's pre-tokenization pattern (the one HF's ByteLevel pre-tokenizer and fairseq's encoder
# apply), spelled for ASCII text, where \p{L} is [A-Za-z], \p{N} is [0-9] and \s is
# [\t\n\v\f\r ]. Python's own ``re`` runs it about twice as fast as the Unicode pattern.
_SPACE = r"\t\n\x0b\x0c\r "
ASCII_PIECES = re.compile(rf"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^{_SPACE}A-Za-z0-9]+"
                          rf"|[{_SPACE}]+(?![^{_SPACE}])|[{_SPACE}]+")
PIECE_CACHE_SIZE = 200_000  # pieces remembered per process (a few tens of MB); then it starts afresh


class Tokenizer(Protocol):
    name: str
    vocab_size: int  # every id that encode_flat can return is below it

    def encode(self, text: str) -> list[str]: ...

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(total_tokens,) the ids of every text, concatenated, and (texts,) each text's length."""
        ...

    def symbol(self, token_id: int) -> str: ...

    def decode(self, symbols: list[str]) -> str: ...

    def save(self, data_dir: str | Path) -> None: ...


class Gpt2Tokenizer:
    """GPT-2 byte-level BPE, identical in output to ``fairseq.data.encoders.gpt2_bpe``.

    BPE never merges across the pieces that pre-tokenization cuts, so a piece has the same
    ids wherever it occurs. ``encode_flat`` cuts ASCII texts itself (``ASCII_PIECES``) and
    looks each piece up in a ``PieceCache``, which encodes a piece with HF ``tokenizers``
    the first time it is seen: on a long corpus almost every piece has been seen before, and
    a text costs one regex pass and one lookup per piece. A text with other characters is one
    piece of its own, encoded whole by HF ``tokenizers``.
    """

    name = "gpt2"

    def __init__(self, encoder_json: str | Path, vocab_bpe: str | Path):
        self.files = {GPT2_ENCODER_FILE: Path(encoder_json), GPT2_MERGES_FILE: Path(vocab_bpe)}
        bpe = models.BPE.from_file(str(encoder_json), str(vocab_bpe))
        self._hf = HFTokenizer(bpe)
        # fairseq's encoder applies GPT-2's regex to the raw text, with no prefix space.
        self._hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        self._hf.decoder = decoders.ByteLevel()
        self.vocab_size = max(self._hf.get_vocab().values()) + 1
        self.pieces = PieceCache(self.encode_ids_whole)

    def encode(self, text: str) -> list[str]:
        return [str(i) for i in self._hf.encode(text, add_special_tokens=False).ids]

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        pieces = [ASCII_PIECES.findall(text) if text.isascii() else [text] for text in texts]
        per_text = np.fromiter(map(len, pieces), dtype=np.int64, count=len(texts))  # (texts,)
        return self.pieces.lookup(list(chain.from_iterable(pieces)), per_text)

    def encode_ids_whole(self, texts: list[str]) -> list[list[int]]:
        """Each text's ids from HF ``tokenizers`` on the whole text, without the piece cache."""
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


class PieceCache:
    """The ids of every piece seen so far, as one ragged table: ``tokens[starts[r]:][:lengths[r]]``
    are the ids of the piece in row ``r``. ``encode`` encodes the pieces not seen yet, in one call;
    past ``PIECE_CACHE_SIZE`` pieces the table starts afresh."""

    def __init__(self, encode):
        self.encode = encode  # list of texts -> list of their ids
        self.clear()

    def clear(self) -> None:
        self.rows: dict[str, int] = {}  # piece -> row
        self.tokens = np.zeros(0, dtype=np.int64)  # (cached tokens,)
        self.starts = np.zeros(0, dtype=np.int64)  # (rows,)
        self.lengths = np.zeros(0, dtype=np.int64)  # (rows,)

    def lookup(self, pieces: list[str], per_text: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ids of ``pieces`` concatenated, and the number of ids of each text, whose pieces
        are the next ``per_text[i]`` of ``pieces``."""
        new = set(pieces).difference(self.rows)
        if len(self.rows) + len(new) > PIECE_CACHE_SIZE:
            self.clear()
            new = set(pieces)
        if new:
            self._add(sorted(new))
        rows = np.fromiter(map(self.rows.__getitem__, pieces), dtype=np.int64, count=len(pieces))  # (pieces,)
        lengths = self.lengths[rows]  # (pieces,) ids per piece
        ends = np.cumsum(lengths)  # (pieces,) where each piece's ids end in the output
        total = int(ends[-1]) if len(ends) else 0
        # output position j, inside piece p, reads tokens[starts[rows[p]] + j - (ends[p] - lengths[p])]
        flat = self.tokens[np.repeat(self.starts[rows] - (ends - lengths), lengths) + np.arange(total)]  # (total,)
        bounds = np.concatenate([[0], ends])[np.cumsum(np.concatenate([[0], per_text]))]  # (texts + 1,)
        return flat, np.diff(bounds)

    def _add(self, pieces: list[str]) -> None:
        tokens, lengths = flatten(self.encode(pieces))
        self.rows.update(zip(pieces, range(len(self.rows), len(self.rows) + len(pieces))))
        self.starts = np.concatenate([self.starts, len(self.tokens) + np.cumsum(lengths) - lengths])
        self.lengths = np.concatenate([self.lengths, lengths])
        self.tokens = np.concatenate([self.tokens, tokens])


def flatten(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(total,) every list of ``ids`` concatenated, and (lists,) each one's length."""
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    return np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum())), lengths


class SentencePieceTokenizer:
    """A sentencepiece model, used as fairseq's ``SentencepieceBPE`` uses it."""

    name = "sentencepiece"

    def __init__(self, model: str | Path):
        self.model_path = Path(model)
        self.sp = spm.SentencePieceProcessor(model_file=str(model))
        self.vocab_size = self.sp.get_piece_size()

    def encode(self, text: str) -> list[str]:
        return self.sp.encode(text, out_type=str)

    def encode_flat(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        # One thread: each preprocessing worker is one process on one core.
        return flatten(self.sp.encode(texts, num_threads=1))

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
        return build_tokenizer(name, encoder_json=data_dir / GPT2_ENCODER_FILE, vocab_bpe=data_dir / GPT2_MERGES_FILE)
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
