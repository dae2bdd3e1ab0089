"""Writes small corpora of token ids for the model tests, through the corpus format's own
writer, so that model tests do not depend on a tokenizer.

Every page of a test example is one unit in a group of its own, read through the
``document`` view: the pages come back exactly as written.
"""

import os
from typing import Dict, List, Sequence

import numpy as np
from fairseq.data import Dictionary

from pagesum_plugin.corpus.format import CorpusMeta, EncodedDocument

from pagesum_plugin.corpus.storage import SplitWriter


def make_dictionary(num_words: int = 60) -> Dictionary:
    dictionary = Dictionary()
    for i in range(num_words):
        dictionary.add_symbol(f"w{i}")
    dictionary.pad_to_multiple_(8)
    return dictionary


def document_of_pages(pages: Sequence[Sequence[int]]) -> EncodedDocument:
    """Content ids per page -> one unit per page, each its own group, no names."""
    n = len(pages)
    zeros = np.zeros(n, dtype=np.int64)
    return EncodedDocument(
        units=np.concatenate([np.asarray(p, dtype=np.int64) for p in pages]),
        heads=np.zeros(0, dtype=np.int64), names=np.zeros(0, dtype=np.int64),
        unit_length=np.array([len(p) for p in pages]), unit_group=np.arange(n),
        head_spaced=zeros, head_plain=zeros, name_length=zeros,
    )


def write_split(data_dir: str, split: str, examples: List[dict], dictionary: Dictionary) -> None:
    """examples: [{"pages": [[ids...], ...], "summary": [ids...]}] (content ids, no specials)."""
    writer = SplitWriter(data_dir, split, len(dictionary))
    for i, example in enumerate(examples):
        writer.add(str(i), " ".join(map(str, example["summary"])), document_of_pages(example["pages"]),
                   np.asarray(example["summary"], dtype=np.int64))
    writer.close()


def write_corpus(data_dir: str, splits: Dict[str, List[dict]], dictionary: Dictionary) -> None:
    """A complete data directory: the dictionary, every split, and its metadata."""
    os.makedirs(data_dir, exist_ok=True)
    dictionary.save(os.path.join(data_dir, "dict.txt"))
    for split, examples in splits.items():
        write_split(data_dir, split, examples, dictionary)
    CorpusMeta(tokenizer="none", dataset="synthetic", view="document", max_pages=64,
               dictionary_size=len(dictionary), splits=list(splits)).save(data_dir)


def copy_task_examples(num_examples: int, dictionary: Dictionary, seed: int = 0, max_pages: int = 4):
    """A learnable synthetic task: one page per example starts with a marker token, and
    the summary is that page's text.

    PageSum sees pages as a set (it has no page order), so the task is defined by
    content: solving it needs the confidence layer to find the marked page and the
    decoder to copy from it. Summaries vary in length, so beam search finishes
    different examples at different steps."""
    rng = np.random.RandomState(seed)
    marker = dictionary.nspecial
    vocab = np.arange(marker + 1, marker + 31)
    examples = []
    for _ in range(num_examples):
        n_pages = rng.randint(1, max_pages + 1)
        pages = [rng.choice(vocab, size=rng.randint(3, 10)).tolist() for _ in range(n_pages)]
        marked = rng.randint(n_pages)
        summary = list(pages[marked])
        pages[marked] = [marker] + pages[marked]
        examples.append({"pages": pages, "summary": summary})
    return examples


def write_copy_task(data_dir: str, train: int = 400, valid: int = 40, test: int = 20, max_pages: int = 4) -> Dictionary:
    dictionary = make_dictionary()
    sizes = {"train": train, "valid": valid, "test": test}
    write_corpus(data_dir, {split: copy_task_examples(n, dictionary, seed=seed, max_pages=max_pages)
                            for seed, (split, n) in enumerate(sizes.items())}, dictionary)
    return dictionary
