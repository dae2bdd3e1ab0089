"""What every decoding path guarantees about a summary's tokens, whatever the model prefers:
it starts with the forced <s> and never repeats it, and its lengths are counted in
summary tokens (the forced <s> and the closing </s> are not summary tokens)."""

import pytest
import torch
from fairseq import search

from builders.models import build_tiny, paged_batch, random_pages
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator


def make_sample(page_lists, dictionary):
    src = paged_batch(page_lists, dictionary)
    return {"id": torch.arange(len(page_lists)), "net_input": {"src_tokens": src}}


def prefer(model, token: int, strength: float = 20.0):
    """Make ``token`` the model's favourite at every step: the last decoder layer's output
    gets a constant component that only ``token``'s output row reads."""
    with torch.no_grad():
        norm = model.decoder.layers[-1].final_layer_norm
        norm.weight[0], norm.bias[0] = 0.0, 1.0
        model.decoder.output_projection.weight[token, 0] = strength
    return model


def summary_tokens(hypo, dictionary):
    """The tokens between the forced <s> and the closing </s>."""
    tokens = hypo["tokens"].tolist()
    assert tokens[0] == dictionary.bos()
    return tokens[1:-1] if tokens[-1] == dictionary.eos() else tokens[1:]


@pytest.fixture(scope="module")
def pages(copy_task_dir):
    _, task, _ = build_tiny(copy_task_dir)
    rng = torch.Generator().manual_seed(5)
    return [random_pages(rng, n, task.dictionary.nspecial, len(task.dictionary) - 8) for n in (1, 3, 2)]


@pytest.fixture(scope="module")
def bos_lover(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir)
    return task, prefer(model, task.dictionary.bos())


@pytest.fixture(scope="module")
def word_lover(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir)
    return task, prefer(model, task.dictionary.nspecial + 1)


@pytest.fixture(scope="module")
def eos_lover(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir)
    return task, prefer(model, task.dictionary.eos())


@pytest.mark.parametrize("strategy", ["beam4", "greedy", "sampling"])
def test_bos_never_follows_the_forced_bos_even_when_the_model_prefers_it(bos_lover, pages, strategy):
    task, model = bos_lover
    torch.manual_seed(0)
    settings = {"beam4": dict(beam_size=4), "greedy": dict(beam_size=1),
                "sampling": dict(beam_size=2, search_strategy=search.Sampling(task.dictionary))}[strategy]
    generator = PageSumSequenceGenerator([model], task.dictionary, max_len_b=10, **settings)
    for hypos in generator.generate([model], make_sample(pages, task.dictionary)):
        for hypo in hypos:
            assert task.dictionary.bos() not in summary_tokens(hypo, task.dictionary)


def test_max_len_b_counts_summary_tokens(word_lover, pages):
    task, model = word_lover  # never wants to stop: every summary runs to the limit
    generator = PageSumSequenceGenerator([model], task.dictionary, beam_size=2, max_len_b=7)
    for hypos in generator.generate([model], make_sample(pages, task.dictionary)):
        assert len(summary_tokens(hypos[0], task.dictionary)) == 7


def test_min_len_counts_summary_tokens(eos_lover, pages):
    task, model = eos_lover  # wants to stop at once: every summary is as short as allowed
    generator = PageSumSequenceGenerator([model], task.dictionary, beam_size=2, min_len=5, max_len_b=20)
    for hypos in generator.generate([model], make_sample(pages, task.dictionary)):
        assert len(summary_tokens(hypos[0], task.dictionary)) == 5


def test_max_len_a_multiplies_the_source_tokens_of_all_pages(word_lover, pages):
    task, model = word_lover
    sample = make_sample(pages, task.dictionary)
    source_tokens = int(sample["net_input"]["src_tokens"].ne(task.dictionary.pad()).sum(dim=(1, 2)).max())
    generator = PageSumSequenceGenerator([model], task.dictionary, beam_size=1, max_len_a=0.25, max_len_b=2)
    for hypos in generator.generate([model], sample):
        assert len(summary_tokens(hypos[0], task.dictionary)) == int(0.25 * source_tokens + 2)
