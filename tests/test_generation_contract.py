"""The generator-model contract (``generation/contract.py``): every registered architecture
that decodes offers it, declares what it does, and does what it declares."""

import pytest
import torch
from fairseq.models import ARCH_MODEL_REGISTRY, FairseqEncoderDecoderModel

from builders.awesome import build_awesome
from builders.models import build_tiny, decoder_input, paged_batch
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.generation.contract import PagePruningModel, SummaryModel, check_models

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one CPU thread

SUMMARIZERS = sorted(arch for arch, cls in ARCH_MODEL_REGISTRY.items()
                     if cls.__module__.startswith("pagesum_plugin") and issubclass(cls, FairseqEncoderDecoderModel))
FAMILIES = {"pagesum": "pagesum_tiny", "hed": "hed_tiny", "hepos": "hepos_tiny", "awesome": "awesome_tiny"}
DECLARED = {  # (mixes_pages, prunes_pages) by model family
    "pagesum": (True, True),
    "hed": (True, False),
    "hepos": (False, False),
    "awesome": (False, False),
}


def family(arch: str) -> str:
    return arch.split("_")[0]


@pytest.fixture(scope="module")
def tiny_models(copy_task_dir):
    """One tiny model of every family, by the family's name: (task, model)."""
    models = {}
    for name, arch in FAMILIES.items():
        if name == "awesome":
            _, task, model = build_awesome(copy_task_dir)
        else:
            _, task, model = build_tiny(copy_task_dir, arch=arch)
        models[name] = (task, model)
    return models


def test_every_registered_summarizer_is_one_of_the_families_under_test():
    assert SUMMARIZERS and {family(arch) for arch in SUMMARIZERS} == set(FAMILIES)
    for arch in SUMMARIZERS:
        assert ARCH_MODEL_REGISTRY[arch] is ARCH_MODEL_REGISTRY[FAMILIES[family(arch)]], arch


@pytest.mark.parametrize("arch", SUMMARIZERS)
def test_every_registered_architecture_offers_the_generation_contract(tiny_models, arch):
    _, model = tiny_models[family(arch)]
    assert isinstance(model, SummaryModel)
    assert (model.mixes_pages, model.prunes_pages) == DECLARED[family(arch)]
    assert isinstance(model, PagePruningModel) or not model.prunes_pages
    check_models([model])


@pytest.mark.parametrize("name", [n for n, (mixes, _) in DECLARED.items() if mixes])
def test_a_model_that_mixes_pages_returns_page_weights_summing_to_one(tiny_models, name):
    task, model = tiny_models[name]
    d = task.dictionary
    src = paged_batch([[[5, 6, 7], [8, 9]], [[10, 11, 12, 13]]], d)  # (2 examples, 2 pages, len)
    _, prev = decoder_input([[5, 6, 7], [8, 9]], d)
    _, extra = model(src, None, prev, features_only=True)
    weights = extra["attn"][0]  # (batch, tgt_len, pages)
    assert weights.shape == (2, prev.size(1), 2)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, prev.size(1)))
    assert torch.all(weights[1, :, 1] == 0), "a missing page weighs nothing"


def test_a_pruning_model_decodes_its_most_confident_pages(tiny_models):
    task, model = tiny_models["pagesum"]
    d = task.dictionary
    src = paged_batch([[[5, 6, 7], [8, 9], [10, 11]]], d)
    sample = {"id": torch.tensor([0]), "net_input": {"src_tokens": src, "src_lengths": src.ne(d.pad()).sum((1, 2))}}
    hypos = PageSumSequenceGenerator([model], d, beam_size=2, max_len_b=5, top_pages=1).generate([model], sample)
    weights = hypos[0][0]["page_weights"]  # (steps, 3): only the kept page is weighed
    assert weights.shape[1] == 3 and int((weights.sum(0) > 0).sum()) == 1


@pytest.mark.parametrize("name", [n for n, (_, prunes) in DECLARED.items() if not prunes])
def test_top_pages_on_a_model_that_cannot_prune_is_one_clear_error_line(tiny_models, name):
    task, model = tiny_models[name]
    with pytest.raises(ValueError) as error:
        PageSumSequenceGenerator([model], task.dictionary, beam_size=2, top_pages=2)
    message = str(error.value)
    assert "\n" not in message and message.startswith("--top-pages 2: the ") and f" {name} model " in message


def test_global_page_decoding_cannot_prune_its_pages(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir, "--page-decoding", "global")
    assert (model.mixes_pages, model.prunes_pages) == (True, False)
    with pytest.raises(ValueError, match="cannot decode a subset of its pages"):
        PageSumSequenceGenerator([model], task.dictionary, top_pages=1)


def test_a_model_without_the_contract_is_refused_naming_what_it_lacks(tiny_models):
    _, model = tiny_models["hepos"]

    class Bare(torch.nn.Module):
        set_beam_size = model.set_beam_size

    with pytest.raises(TypeError, match="does not define mixes_pages, prunes_pages"):
        check_models([Bare()])

