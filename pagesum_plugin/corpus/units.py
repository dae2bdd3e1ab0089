"""Raw examples as sentence units of ids, for any tokenizer: what ``codec.TextCodec`` stores and
what ``pagesum_plugin.hf``'s processor reads, the same ids from the same text.

Each sentence is stored as it reads after another one (with a leading space), and its first word
as it reads at the start of a page (byte-level BPE encodes " word" and "word" differently;
sentencepiece does not, and its heads are empty). A group (section or source document) without
sentences is left out. Every text of a batch goes through the tokenizer in one call.
"""

from typing import Callable, List, Optional, Tuple

import numpy as np

from .format import EncodedDocument
from .readers import Example

# texts -> (every text's ids concatenated (total,), each text's length (texts,))
EncodeFlat = Callable[[List[str]], Tuple[np.ndarray, np.ndarray]]


def encode_examples(examples: List[Example], encode_flat: EncodeFlat,
                    plain_heads: bool = True) -> List[Tuple[Optional[EncodedDocument], np.ndarray]]:
    """``(document, summary ids)`` of every example, a document without sentences ``None``;
    ``plain_heads``: whether a first word reads otherwise without its leading space (byte-level
    BPE; not sentencepiece)."""
    groups = [[(unit.name, unit.sentence_list()) for unit in example.units] for example in examples]
    groups = [[(name, sentences) for name, sentences in document if sentences] for document in groups]
    sentences = [" " + sentence for document in groups for _, sentences in document for sentence in sentences]
    names = [f"{name}:" for document in groups for name, _ in document if name]
    summaries = [summary_text(example.summary) for example in examples]
    words = _first_words(groups) if plain_heads else []
    flat, lengths = encode_flat(sentences + names + summaries + words + [" " + word for word in words])
    texts = _Texts.of_batch(flat, lengths)
    sentence_ids, name_ids, summary_ids = texts.take(len(sentences)), texts.take(len(names)), texts.take(len(summaries))
    heads = _plain_heads(words, texts.take(len(words)), texts.take(len(words)))
    return [
        (_document(document, sentence_ids, name_ids, heads) if document else None, summary_ids.next_ids())
        for document in groups
    ]


def summary_text(text: str) -> str:
    """Whitespace collapsed to single spaces, as every page's sentences are (and as the authors
    join summary sentences): a newline never spends a token."""
    return " ".join(text.split())


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
