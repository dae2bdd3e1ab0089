"""Writes small paged data directories and tiny BART checkpoints for the tests.

The data follow the on-disk contract of ``pagesum-preprocess`` (see README) but are
built from token ids directly, so model tests do not depend on a tokenizer.
"""

import json
import os
from typing import List, Sequence

import numpy as np
import torch
from fairseq.data import Dictionary, indexed_dataset


def make_dictionary(num_words: int = 60) -> Dictionary:
    dictionary = Dictionary()
    for i in range(num_words):
        dictionary.add_symbol(f"w{i}")
    dictionary.pad_to_multiple_(8)
    return dictionary


def write_indexed(prefix: str, items: Sequence[Sequence[int]], vocab_size: int) -> None:
    builder = indexed_dataset.make_builder(indexed_dataset.data_file_path(prefix), impl="mmap", vocab_size=vocab_size)
    for item in items:
        builder.add_item(torch.IntTensor(list(item)))
    builder.finalize(indexed_dataset.index_file_path(prefix))


def write_split(data_dir: str, split: str, examples: List[dict], dictionary: Dictionary) -> None:
    """examples: [{"pages": [[ids...], ...], "summary": [ids...]}] (content ids, no specials)."""
    bos, eos = dictionary.bos(), dictionary.eos()
    pages = [[bos, *page, eos] for ex in examples for page in ex["pages"]]
    summaries = [[bos, *ex["summary"], eos] for ex in examples]
    write_indexed(os.path.join(data_dir, f"{split}.pages"), pages, len(dictionary))
    write_indexed(os.path.join(data_dir, f"{split}.summary"), summaries, len(dictionary))
    np.save(os.path.join(data_dir, f"{split}.page_counts.npy"), np.array([len(ex["pages"]) for ex in examples]))
    with open(os.path.join(data_dir, f"{split}.ids.txt"), "w") as f:
        f.writelines(f"{i}\n" for i in range(len(examples)))


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
    os.makedirs(data_dir, exist_ok=True)
    dictionary = make_dictionary()
    dictionary.save(os.path.join(data_dir, "dict.txt"))
    for seed, (split, n) in enumerate((("train", train), ("valid", valid), ("test", test))):
        write_split(data_dir, split, copy_task_examples(n, dictionary, seed=seed, max_pages=max_pages), dictionary)
    with open(os.path.join(data_dir, "meta.json"), "w") as f:
        json.dump({"format_version": 1, "tokenizer": "none", "locality": "synthetic"}, f)
    return dictionary
