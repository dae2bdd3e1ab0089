"""--compile-decoder: beam search with every decoder layer compiled by torch.compile gives
the same hypotheses and scores as without. On CPU the test compiles through torch's
``aot_eager`` backend (the same graph capture, with dynamic cache lengths, without
generating C++ kernels, which takes minutes on a small machine)."""

import pytest
import torch

from builders.models import build_tiny, make_source_sensitive, paged_batch, random_pages, vocab
from builders.stock import assert_same_hypotheses
from pagesum_plugin.generation import PageSumSequenceGenerator

pytestmark = pytest.mark.slow


def test_a_compiled_decoder_decodes_as_the_eager_one(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir)
    model = make_source_sensitive(model, task.dictionary)
    rng = torch.Generator().manual_seed(0)
    low, high = vocab(task.dictionary)
    src = paged_batch([random_pages(rng, n, low, high) for n in (3, 1, 2)], task.dictionary)
    sample = {"id": torch.arange(3), "net_input": {"src_tokens": src}}
    settings = {"beam_size": 3, "max_len_b": 6, "min_len": 1, "no_repeat_ngram_size": 3}
    eager = PageSumSequenceGenerator([model], task.dictionary, **settings).generate([model], sample)
    compiled = PageSumSequenceGenerator([model], task.dictionary, compile_decoder="aot_eager", **settings)
    assert all(layer._compiled_call_impl is not None for layer in model.decoder.layers)
    assert_same_hypotheses(compiled.generate([model], sample), eager)
