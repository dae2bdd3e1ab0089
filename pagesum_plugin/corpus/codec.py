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

from .format import CorpusMeta, EncodedDocument
from .readers import Example
from .storage import load_dictionary
from .tokenizers import Tokenizer, load_tokenizer
from .units import encode_examples, summary_text


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
        return self.ids(summary_text(text))

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
        return encode_examples(examples, self._encode_flat, plain_heads=self.tokenizer.name != "sentencepiece")

    # ---- ids -> text ---------------------------------------------------------------------

    def decode(self, ids) -> str:
        """One line of text from ids; the special-token rule of the whole project."""
        symbols = [self.dictionary[int(i)] for i in ids if int(i) not in self.specials]
        return " ".join(self.tokenizer.decode(symbols).split())

    def symbols(self, ids) -> list:
        """Dictionary symbols of ``ids``, specials included (for inspection and plots)."""
        return [self.dictionary[int(i)] for i in ids]


# --------------------------------------------------------------------------- a stored document's units


def unit_ids(document: EncodedDocument) -> List[np.ndarray]:
    """Every unit's ids as it reads after another sentence (with its leading space)."""
    return np.split(document.units, np.cumsum(document.unit_length)[:-1])


def unit_texts(codec: TextCodec, document: EncodedDocument) -> List[str]:
    return [codec.decode(ids) for ids in unit_ids(document)]
