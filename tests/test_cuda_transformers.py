"""What only a GPU can show of the transformers model: transformers compiles its greedy search with a static cache,
CUDA graphs and all. Skipped, with the reason, where torch sees no CUDA device, or where transformers is older than
setup.py's ``hf`` extra asks (``pagesum_plugin.hf`` refuses it at import); docs/benchmarks/gpu.md says where it last
ran."""

import pytest
import torch
from torch._dynamo.utils import counters
from transformers import CompileConfig

from builders.models import build_tiny, make_source_sensitive
from builders.systems import pages

try:  # pagesum_plugin.hf refuses, in one line, a transformers older than the hf extra asks
    from pagesum_plugin.checkpoints.convert import pagesum_hf_model
    from pagesum_plugin.hf import summary_lengths
except ImportError as refusal:
    pytest.skip(str(refusal), allow_module_level=True)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch sees none)")


def test_transformers_compiles_greedy_search_with_a_static_cache_and_finds_the_eager_summaries(copy_task_dir):
    """On a GPU, ``generate(cache_implementation="static")`` compiles the model's forward for greedy search by
    itself, with CUDA graphs (``mode="reduce-overhead"``): PageSum's forward compiles whole (``fullgraph=True``), one
    graph for every step after the first, and gives the summaries of the dynamic cache, eager, in this search and the
    next (pages of every count, padding pages among them)."""
    args, task, model = build_tiny(copy_task_dir)
    model = make_source_sensitive(model, task.dictionary)
    hf = pagesum_hf_model(args, model.state_dict(), {"label_smoothing": 0.1}).cuda().eval()
    src = pages(task, (3, 1, 4, 2)).cuda()
    greedy = dict(num_beams=1, do_sample=False, **summary_lengths(1, 20))
    expected = hf.generate(input_ids=src, **greedy)
    torch._dynamo.reset()
    counters.clear()
    for _ in range(2):
        summaries = hf.generate(input_ids=src, cache_implementation="static",
                                compile_config=CompileConfig(fullgraph=True), **greedy)
        assert torch.equal(summaries, expected)
    assert counters["stats"]["unique_graphs"] == 1 and expected.size(1) > 3
