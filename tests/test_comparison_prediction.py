"""Where the comparison's fit starts its search: the memory model's longest input for each
system of ``recipes/config/compare.yaml``."""

import os
from dataclasses import replace

import pytest

from builders.cli import REPO_ROOT
from pagesum_plugin.architectures import LOSS_CHUNK_TOKENS
from pagesum_plugin.memory.model import GB, predict
from pagesum_recipes.comparison.prediction import at_length, model_step, predicted_units
from pagesum_recipes.comparison.systems import Comparison

COMPARISON = Comparison(os.path.join(REPO_ROOT, "recipes", "config", "compare.yaml"))
SYSTEMS = {"pagesum_spatial": "pagesum", "hepos_sinkhorn": "hepos", "hed": "hed", "awesome": "awesome",
           "bart_full": "bart"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A data directory whose dictionary has BART's 50,261 words."""
    root = tmp_path_factory.mktemp("data")
    (root / "dict.txt").write_text("".join(f"{i} 1\n" for i in range(50261)))
    return root


@pytest.mark.parametrize("key", SYSTEMS)
def test_each_system_is_priced_as_its_experiment_trains_it(key, data):
    step = model_step(COMPARISON, key, data, None, "fp16")
    config = COMPARISON.experiment(key)
    assert step.system == SYSTEMS[key] and step.arch.vocab == 50265 and step.arch.embed_dim == 1024
    assert step.checkpointing == bool(config.model.get("checkpoint_activations", False))
    assert step.summary_tokens == COMPARISON.training.max_summary_tokens
    # every experiment trains with the plugin's chunked loss, which takes the whole logits in fp16
    assert step.loss_chunk == 0 and replace(step, dtype="bf16").loss_chunk == LOSS_CHUNK_TOKENS


@pytest.mark.parametrize("key", SYSTEMS)
def test_the_predicted_start_is_the_longest_input_the_model_fits(key, data):
    budget = 24 * GB
    units = predicted_units(COMPARISON, key, data, budget, None, "fp16")
    step, view = model_step(COMPARISON, key, data, None, "fp16"), COMPARISON.view(key)
    assert 1 <= units <= COMPARISON.max_units_of(key)
    assert units == 1 or predict(at_length(step, view, units, COMPARISON.unit)).peak <= budget
    if units < COMPARISON.max_units_of(key):
        assert predict(at_length(step, view, units + 1, COMPARISON.unit)).peak > budget


def test_a_smaller_model_size_is_priced_at_its_own_dimensions(data):
    assert model_step(COMPARISON, "pagesum_spatial", data, "bart_base", "fp32").arch.embed_dim == 768
