"""Builds a tiny byte-level GPT-2 BPE vocabulary, in the files BART ships.

``build_gpt2_bpe(out_dir, texts, vocab_size)`` trains the vocabulary with HF
``tokenizers`` and writes:

* ``encoder.json``: token -> GPT-2 id (the byte-level alphabet plus learned merges);
* ``vocab.bpe``: the merges, with GPT-2's ``#version`` header;
* ``dict.txt``: a BART-style fairseq dictionary, one ``<gpt2 id> <count>`` line per
  token, most frequent first, counted by encoding ``texts``.
"""

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tokenizers import ByteLevelBPETokenizer

DEFAULT_TEXTS = (
    "The quick brown fox jumps over the lazy dog. Summaries are short; documents are long.",
    "Smith et al. (2020) report a 3.5% gain, e.g. on arXiv and PubMed, in the U.S. and U.K.",
    "Page-level encoders don't attend across pages: each page is encoded independently.",
    "Multi-document clusters hold several news stories about one event.",
    "Unicode: café, naïve, Zürich, 東京, emoji 🙂 and tabs\tand newlines\nare bytes too.",
)


@dataclass(frozen=True)
class Gpt2BpeFiles:
    encoder_json: Path
    vocab_bpe: Path
    dict_txt: Path


def build_gpt2_bpe(out_dir: str | Path, texts: Iterable[str] = DEFAULT_TEXTS, vocab_size: int = 400,
                   leave_out_of_dict: int = 0) -> Gpt2BpeFiles:
    """Train a byte-level BPE on ``texts`` and write encoder.json, vocab.bpe and dict.txt.

    ``leave_out_of_dict`` drops that many of the rarest ids from dict.txt, to test how
    ids unknown to the dictionary are handled (BART's dict.txt also lacks a few ids).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    texts = list(texts)
    trainer = ByteLevelBPETokenizer(add_prefix_space=False)
    trainer.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=1, show_progress=False,
                                special_tokens=[])
    vocab_path, merges_path = trainer.save_model(str(out_dir))
    encoder_json = out_dir / "encoder.json"
    vocab_bpe = out_dir / "vocab.bpe"
    Path(vocab_path).replace(encoder_json)
    Path(merges_path).replace(vocab_bpe)

    counts = Counter()
    for text in texts:
        counts.update(trainer.encode(text).ids)
    vocab = json.loads(encoder_json.read_text(encoding="utf-8"))
    # Most frequent first, ties by id: the order fairseq-preprocess gives BART's dict.
    ids = sorted(vocab.values(), key=lambda i: (-counts[i], i))
    if leave_out_of_dict:
        ids = ids[:-leave_out_of_dict]
    dict_txt = out_dir / "dict.txt"
    dict_txt.write_text("".join(f"{i} {counts[i]}\n" for i in ids), encoding="utf-8")
    return Gpt2BpeFiles(encoder_json, vocab_bpe, dict_txt)
