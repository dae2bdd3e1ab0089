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
        # tokenizer id -> dictionary id; a symbol the dictionary lacks is <unk>
        self._to_dictionary = np.array([dictionary.index(tokenizer.symbol(i)) for i in range(tokenizer.vocab_size)],
                                       dtype=np.int64)

    @classmethod
    def from_data_dir(cls, data_dir: str | Path, meta: CorpusMeta | None = None) -> "TextCodec":
        meta = meta or CorpusMeta.load(data_dir)
        return cls(load_tokenizer(data_dir, meta.tokenizer), load_dictionary(data_dir))

    # ---- text -> ids ---------------------------------------------------------------------

    def ids(self, text: str) -> np.ndarray:
        """Dictionary ids of ``text`` (no specials); symbols the dictionary lacks become <unk>."""
        return self.ids_batch([text])[0]

    def ids_batch(self, texts: list[str]) -> list[np.ndarray]:
        """``[self.ids(text) for text in texts]``, in one tokenizer call and one lookup."""
        flat, lengths = self._encode_flat(texts)
        return np.split(flat, np.cumsum(lengths)[:-1]) if texts else []

    def _encode_flat(self, texts: list[str]) -> tuple:
        """The dictionary ids of every text, concatenated, and each text's length."""
        flat, lengths = self.tokenizer.encode_flat(texts)
        return self._to_dictionary[flat], lengths  # (total_tokens,), (texts,)

    def encode_summary(self, text: str) -> np.ndarray:
        """Whitespace collapsed to single spaces, as every page's sentences are (and as the
        authors join summary sentences): a newline never spends a token."""
        return self.ids(_summary_text(text))

    def encode_document(self, example: Example) -> EncodedDocument:
        """Sentence units of every group (section or source document) of ``example``.

        Each sentence is stored as it reads after another one (with a leading space), and
        its first word as it reads at the start of a page. A group without sentences is
        left out."""
        document, _ = self.encode_examples([example])[0]
        if document is None:
            raise ValueError(f"example {example.id!r} has no sentences")
        return document

    def encode_examples(self, examples: list[Example]) -> list[tuple[EncodedDocument | None, np.ndarray]]:
        """``(encode_document(example), encode_summary(example.summary))`` of every example,
        with every sentence, section name, summary and first word of the batch encoded in one
        tokenizer call; a document without sentences is ``None``."""
        groups = [[(unit.name, unit.sentence_list()) for unit in example.units] for example in examples]
        groups = [[(name, sentences) for name, sentences in document if sentences] for document in groups]
        sentences = [" " + sentence for document in groups for _, sentences in document for sentence in sentences]
        names = [f"{name}:" for document in groups for name, _ in document if name]
        summaries = [_summary_text(example.summary) for example in examples]
        words = _first_words(groups) if self.tokenizer.name != "sentencepiece" else []
        flat, lengths = self._encode_flat(sentences + names + summaries + words + [" " + word for word in words])
        texts = _Texts.of_batch(flat, lengths)
        sentence_ids, name_ids, summary_ids = texts.take(len(sentences)), texts.take(len(names)), texts.take(len(summaries))
        heads = _plain_heads(words, texts.take(len(words)), texts.take(len(words)))
        return [
            (_document(document, sentence_ids, name_ids, heads) if document else None, summary_ids.next_ids())
            for document in groups
        ]

    # ---- ids -> text ---------------------------------------------------------------------

    def decode(self, ids) -> str:
        """One line of text from ids; the special-token rule of the whole project."""
        symbols = [self.dictionary[int(i)] for i in ids if int(i) not in self.specials]
        return " ".join(self.tokenizer.decode(symbols).split())

    def symbols(self, ids) -> list:
        """Dictionary symbols of ``ids``, specials included (for inspection and plots)."""
        return [self.dictionary[int(i)] for i in ids]


def _plain_heads(words: list[str], plain: "_Texts", spaced: "_Texts") -> dict:
    """How each first word reads without a leading space: the ids that replace the first
    ``replaced`` ids of its spaced form. Only the first whitespace-delimited word can
    differ; sentencepiece ignores the space (no words, every head empty)."""
    heads = {}
    for word in words:
        spaced_ids, plain_ids = spaced.next_ids(), plain.next_ids()
        shared = _common_suffix(spaced_ids, plain_ids)
        heads[word] = (plain_ids[: len(plain_ids) - shared], len(spaced_ids) - shared)
    return heads


class _Texts:
    """The encoded texts of one batch, read off in order (``take(n)``: the next ``n`` of them)."""

    def __init__(self, flat: np.ndarray, starts: np.ndarray):
        self.flat = flat  # (total_tokens,) dictionary ids of every text of the batch
        self.starts = starts  # (texts + 1,) where each of these texts starts in ``flat``
        self.text = 0  # the next text to read

    @classmethod
    def of_batch(cls, flat: np.ndarray, lengths: np.ndarray) -> "_Texts":
        return cls(flat, np.concatenate([[0], np.cumsum(lengths)]))

    def take(self, n: int) -> "_Texts":
        part = _Texts(self.flat, self.starts[self.text: self.text + n + 1])
        self.text += n
        return part

    def next_ids(self) -> np.ndarray:
        start, end = self.starts[self.text], self.starts[self.text + 1]
        self.text += 1
        return self.flat[start:end]

    def next_block(self, n: int) -> tuple:
        """The next ``n`` texts' ids, concatenated, and their lengths."""
        starts = self.starts[self.text: self.text + n + 1]
        self.text += n
        return self.flat[starts[0]: starts[-1]], np.diff(starts)


def _summary_text(text: str) -> str:
    return " ".join(text.split())


def _first_words(groups: list) -> list[str]:
    """Every distinct first word of the sentences of ``groups``, in order of appearance."""
    return list(dict.fromkeys(sentence.split(maxsplit=1)[0] for document in groups
                              for _, sentences in document for sentence in sentences))


def _document(groups: list, sentence_ids: _Texts, name_ids: _Texts, heads: dict) -> EncodedDocument:
    """One document's ``EncodedDocument`` from its part of a batch (``groups``: its
    ``(name, sentences)`` with at least one sentence each)."""
    counts = [len(sentences) for _, sentences in groups]
    units, unit_length = sentence_ids.next_block(sum(counts))
    names = [name_ids.next_ids() if name else np.zeros(0, dtype=np.int64) for name, _ in groups]
    head_parts, head_spaced = [], []
    for _, sentences in groups:
        for sentence in sentences:
            head, replaced = heads.get(sentence.split(maxsplit=1)[0], _NO_HEAD)
            head_parts.append(head)
            head_spaced.append(replaced)
    return EncodedDocument(
        units=units.copy(), heads=_concat(head_parts), names=_concat(names),
        unit_length=unit_length.copy(), unit_group=np.repeat(np.arange(len(groups)), counts),
        head_spaced=np.array(head_spaced), head_plain=np.array([len(head) for head in head_parts]),
        name_length=np.array([len(name) for name in names]),
    )


_NO_HEAD = (np.zeros(0, dtype=np.int64), 0)  # sentencepiece: the first word never changes


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
