"""--compile-decoder: beam search with every decoder layer compiled by torch.compile gives
the same hypotheses and scores as without, and a stack of any depth compiles one set of
graphs that all its layers share, every layer running compiled at every step. On CPU the
test compiles through torch's ``aot_eager`` backend (the same graph capture, with dynamic
cache lengths, without generating C++ kernels, which takes minutes on a small machine),
counting the graphs it is given and their calls."""

import pytest
import torch
import torch._dynamo

from builders.models import build_tiny, make_source_sensitive, paged_batch, random_pages, vocab
from builders.stock import assert_same_hypotheses
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_recipes.profiling import CountedGraphs, count_calls

pytestmark = pytest.mark.slow

SETTINGS = {"beam_size": 3, "max_len_b": 6, "min_len": 1, "no_repeat_ngram_size": 3}


def tiny_search(data_dir, *extra_args):
    """A tiny PageSum model and a batch of 3 examples of 3, 1 and 2 pages."""
    _, task, model = build_tiny(data_dir, *extra_args)
    model = make_source_sensitive(model, task.dictionary)
    rng = torch.Generator().manual_seed(0)
    low, high = vocab(task.dictionary)
    src = paged_batch([random_pages(rng, n, low, high) for n in (3, 1, 2)], task.dictionary)
    return task, model, {"id": torch.arange(3), "net_input": {"src_tokens": src}}


def test_every_layer_of_a_deep_compiled_decoder_runs_compiled_and_decodes_as_the_eager_one(copy_task_dir):
    torch._dynamo.reset()
    layers = 12  # bart.large's decoder, beyond torch.compile's 8 graphs per code object
    task, model, sample = tiny_search(copy_task_dir, "--decoder-layers", str(layers))
    eager = PageSumSequenceGenerator([model], task.dictionary, **SETTINGS).generate([model], sample)
    backend = CountedGraphs("aot_eager")
    generator = PageSumSequenceGenerator([model], task.dictionary, compile_decoder=backend, **SETTINGS)
    decoder_calls = count_calls(model.decoder)
    assert_same_hypotheses(generator.generate([model], sample), eager)
    assert sum(backend.calls.values()) == layers * decoder_calls["forward"]  # no layer fell back to eager
    assert len(backend.calls) < 8  # one set of graphs (the first step, the later ones, their layouts) for the stack
    torch._dynamo.reset()
