"""The text codec: raw text to stored ids, and ids back to text, with one special-token rule.

* ``encode_document(example)`` turns an ``Example`` (see ``readers.py``) into sentence
  units with their groups and section names (``format.EncodedDocument``);
* ``encode_summary(text)`` gives a summary's ids, without specials or truncation (the
  dataset adds ``<s> ... </s>`` and truncates when it loads);
* ``decode(ids)`` gives one line of text: ``<s>``, ``</s>`` and padding are dropped,
  every other id is detokenized (``<unk>`` stays visible), and whitespace runs become
  one space. Hypotheses, page-weight records, references and ``summarize()`` all use it;
* ``unit_texts(codec, document)`` gives a stored document's sentences (units) as text, one
  each, as they read after another sentence (``unit_ids`` their ids).

Whitespace rule: a unit is a sentence with its whitespace collapsed, and units are
joined by single spaces in every view.
"""

from pathlib import Path
from typing import List

import numpy as np
from fairseq.data import Dictionary

from .format import CorpusMeta, EncodedDocument, load_dictionary
from .readers import Example
from .tokenizers import Tokenizer, load_tokenizer


class TextCodec:
    def __init__(self, tokenizer: Tokenizer, dictionary: Dictionary):
        self.tokenizer = tokenizer
        self.dictionary = dictionary
        self.specials = {dictionary.bos(), dictionary.eos(), dictionary.pad()}

    @classmethod
    def from_data_dir(cls, data_dir: str | Path, meta: CorpusMeta | None = None) -> "TextCodec":
        meta = meta or CorpusMeta.load(data_dir)
        return cls(load_tokenizer(data_dir, meta.tokenizer), load_dictionary(data_dir))

    # ---- text -> ids ---------------------------------------------------------------------

    def ids(self, text: str) -> np.ndarray:
        """Dictionary ids of ``text`` (no specials); symbols the dictionary lacks become <unk>."""
        return np.array([self.dictionary.index(symbol) for symbol in self.tokenizer.encode(text)], dtype=np.int64)

    def encode_summary(self, text: str) -> np.ndarray:
        """Whitespace collapsed to single spaces, as every page's sentences are (and as the
        authors join summary sentences): a newline never spends a token."""
        return self.ids(" ".join(text.split()))

    def encode_document(self, example: Example) -> EncodedDocument:
        """Sentence units of every group (section or source document) of ``example``.

        Each sentence is stored as it reads after another one (with a leading space), and
        its first word as it reads at the start of a page. A group without sentences is
        left out."""
        units, heads, names = [], [], []
        unit_length, unit_group, head_spaced, head_plain, name_length = [], [], [], [], []
        for unit in example.units:
            sentences = unit.sentence_list()
            if not sentences:
                continue
            group = len(name_length)
            name = self.ids(f"{unit.name}:") if unit.name else np.zeros(0, dtype=np.int64)
            names.append(name)
            name_length.append(len(name))
            for sentence in sentences:
                spaced = self.ids(" " + sentence)
                head, replaced = self._plain_head(sentence)
                units.append(spaced)
                heads.append(head)
                unit_length.append(len(spaced))
                unit_group.append(group)
                head_spaced.append(replaced)
                head_plain.append(len(head))
        if not units:
            raise ValueError(f"example {example.id!r} has no sentences")
        return EncodedDocument(
            units=np.concatenate(units), heads=_concat(heads), names=_concat(names),
            unit_length=np.array(unit_length), unit_group=np.array(unit_group),
            head_spaced=np.array(head_spaced), head_plain=np.array(head_plain),
            name_length=np.array(name_length),
        )

    def _plain_head(self, sentence: str) -> tuple:
        """How the sentence's first word reads without a leading space: the ids that replace
        the first ``replaced`` ids of its spaced form. Only the first whitespace-delimited
        word can differ, so only it is encoded again; sentencepiece ignores the space."""
        if self.tokenizer.name == "sentencepiece":
            return np.zeros(0, dtype=np.int64), 0
        word = sentence.split(maxsplit=1)[0]
        spaced, plain = self.ids(" " + word), self.ids(word)
        shared = _common_suffix(spaced, plain)
        return plain[: len(plain) - shared], len(spaced) - shared

    # ---- ids -> text ---------------------------------------------------------------------

    def decode(self, ids) -> str:
        """One line of text from ids; the special-token rule of the whole project."""
        symbols = [self.dictionary[int(i)] for i in ids if int(i) not in self.specials]
        return " ".join(self.tokenizer.decode(symbols).split())

    def symbols(self, ids) -> list:
        """Dictionary symbols of ``ids``, specials included (for inspection and plots)."""
        return [self.dictionary[int(i)] for i in ids]


def _common_suffix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    same = a[len(a) - n:][::-1] == b[len(b) - n:][::-1]
    return n if same.all() else int(np.argmin(same))


def _concat(parts: list) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


# --------------------------------------------------------------------------- a stored document's units


def unit_ids(document: EncodedDocument) -> List[np.ndarray]:
    """Every unit's ids as it reads after another sentence (with its leading space)."""
    return np.split(document.units, np.cumsum(document.unit_length)[:-1])


def unit_texts(codec: TextCodec, document: EncodedDocument) -> List[str]:
    return [codec.decode(ids) for ids in unit_ids(document)]
