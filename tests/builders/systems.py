"""Every system's tiny model, by name.

- ``EVERY_SYSTEM[name](data_dir)`` is (args, task, model) for the four systems with models of
  their own;
- ``build_system(name, data_dir)`` is a ``System`` ready for beam search, full-attention BART
  included (HEPOS's model with both attentions full): its model made to end beams and
  examples at different steps, its generator, and samples of the system's own input layout.
"""

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from builders.awesome import build_awesome, randomize_memories, segment_sample
from builders.hed import build_hed
from builders.hepos import SMALL_PATTERNS, build_hepos, flat_batch, random_texts
from builders.models import build_tiny, make_source_sensitive, paged_batch, random_pages, vocab
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.systems.awesome.generator import SegmentSequenceGenerator

EVERY_SYSTEM = {
    "pagesum": lambda d: build_tiny(d),
    "hed": lambda d: build_hed(d),
    "hepos": lambda d: build_hepos(d, "--encoder-attention", "window", *SMALL_PATTERNS),
    "awesome": lambda d: build_awesome(d, "--memory", "attentive"),
}
SEARCHED_SYSTEMS = ["pagesum", "hepos", "bart", "hed", "awesome"]  # every system a user decodes
FLAT_INPUT = ("hepos", "bart")  # one sequence per example
# beam searches that end beams and examples at different steps, and bind each length setting
BEAM_SETTINGS = {
    "beams-end-apart": dict(beam_size=4, min_len=2, max_len_b=25),
    "lenpen-trigrams": dict(beam_size=4, len_penalty=2.0, max_len_b=30, no_repeat_ngram_size=3),
    "min-len": dict(beam_size=3, min_len=12, max_len_b=20),
    "max-len-reached": dict(beam_size=3, max_len_b=4),
    "greedy": dict(beam_size=1, max_len_b=15),
    "unkpen-temperature-unnormalized": dict(beam_size=3, unk_penalty=-3.0, temperature=0.7, normalize_scores=False,
                                            max_len_b=15),
}


@dataclass
class System:
    name: str
    task: object
    model: object
    generator_cls: type
    make_sample: Callable  # (counts, seed) -> sample: ``counts`` pages, documents or segments per example

    def generator(self, models=None, **settings):
        return self.generator_cls(models or [self.model], self.task.dictionary, **settings)


def paged_sample(task, counts, seed, first_page_only=False):
    rng = torch.Generator().manual_seed(seed)
    src = paged_batch([random_pages(rng, n, *vocab(task.dictionary)) for n in counts], task.dictionary)
    if first_page_only:  # one flat sequence per example (HEPOS)
        src = src[:, :1, : int(src[:, 0].ne(task.dictionary.pad()).sum(1).max())]
    return {"id": torch.arange(len(counts)),
            "net_input": {"src_tokens": src, "src_lengths": src.ne(task.dictionary.pad()).sum((1, 2))}}


def segmented_sample(task, counts, seed):
    rng = np.random.RandomState(seed)
    low, high = vocab(task.dictionary)
    documents = [[rng.randint(low, high, size=rng.randint(4, 11)).tolist() for _ in range(n)] for n in counts]
    return segment_sample(documents, [[[low]] * n for n in counts], task.dictionary)


def build_system(name, data_dir) -> System:
    if name == "awesome":
        _, task, model = build_awesome(data_dir, "--memory", "attentive")
        model = make_source_sensitive(randomize_memories(model), task.dictionary)
        return System(name, task, model, SegmentSequenceGenerator,
                      lambda counts, seed: segmented_sample(task, counts, seed))
    builders = {**EVERY_SYSTEM,
                "bart": lambda d: build_hepos(d, "--encoder-attention", "full", "--cross-attention", "full")}
    _, task, model = builders[name](data_dir)
    model = make_source_sensitive(model, task.dictionary)
    return System(name, task, model, PageSumSequenceGenerator,
                  lambda counts, seed: paged_sample(task, counts, seed, first_page_only=name in FLAT_INPUT))


# ---- training inputs: (task, model, src_tokens) per system, for a loss of the summaries -----------


def pages(task, counts, seed=0):
    rng = torch.Generator().manual_seed(seed)
    low, high = vocab(task.dictionary)
    return paged_batch([random_pages(rng, n, low, high) for n in counts], task.dictionary)


def flat_source(task):
    return flat_batch(random_texts(torch.Generator().manual_seed(1), [40, 17, 33, 9], task.dictionary), task.dictionary)


TRAINED_SYSTEMS = {
    # name: (build(data_dir) -> (args, task, model), source(task) -> src_tokens)
    "pagesum": (lambda d: build_tiny(d), lambda task: pages(task, (3, 1, 4, 2))),  # padding pages after 3 of 4
    "pagesum-global": (lambda d: build_tiny(d, "--page-decoding", "global"), lambda task: pages(task, (3, 1, 4, 2))),
    "hepos": (EVERY_SYSTEM["hepos"], flat_source),
    "hepos-sinkhorn-full": (lambda d: build_hepos(d, "--encoder-attention", "sinkhorn", "--encoder-layout", "uniform",
                                                  "--cross-attention", "full", *SMALL_PATTERNS), flat_source),
    "bart": (lambda d: build_hepos(d, "--encoder-attention", "full", "--cross-attention", "full"), flat_source),
    "hed": (EVERY_SYSTEM["hed"], lambda task: pages(task, (2, 3, 1, 2), seed=2)),  # documents as pages
    "awesome": (EVERY_SYSTEM["awesome"], lambda task: flat_source(task)[:, 0]),  # one segment per row
}
SUMMARIES = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15], [16]]  # one per example of every source, padded


def trained_system(name, data_dir):
    """(task, model, src_tokens) of ``TRAINED_SYSTEMS[name]``, the model in eval mode."""
    build, source = TRAINED_SYSTEMS[name]
    _, task, model = build(data_dir)
    return task, model, source(task)


def loss_and_grads(model, src, prev, target, pad, **forward):
    """(the summed NLL of ``target``, every parameter's gradient by name) of one forward and
    backward; torch's seed fixed, for the noise of Sinkhorn's sorting network in training.
    ``forward``: the model's other arguments (``host_facts``)."""
    torch.manual_seed(0)
    model.zero_grad()
    logits, _ = model(src, None, prev, **forward)
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    nll = -lprobs.gather(2, target.unsqueeze(2)).squeeze(2)
    loss = nll.masked_fill(target.eq(pad), 0.0).sum()
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
