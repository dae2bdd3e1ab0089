"""A tiny random BERT for next-sentence prediction, saved as a local model directory: what the
coherence score (Eq. 11) reads in place of bert-large-uncased."""

import collections
from pathlib import Path
from typing import Iterable

import torch

from pagesum_plugin.evaluation.rouge import tokenize


def write_tiny_nsp_bert(out: Path, texts: Iterable[str]) -> str:
    """``BertForNextSentencePrediction`` (2 layers of width 32) with a word-level vocabulary of
    ``texts``, and its tokenizer, saved into ``out``; returns the directory."""
    # optional (the hf extra): only the coherence score reads a BERT model
    from transformers import BertConfig, BertForNextSentencePrediction, BertTokenizerFast

    words = collections.Counter(w for text in texts for w in tokenize(text))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words)]
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizerFast(vocab_file=str(out / "vocab.txt"), do_lower_case=True).save_pretrained(out)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertForNextSentencePrediction(config).save_pretrained(out)
    return str(out)
