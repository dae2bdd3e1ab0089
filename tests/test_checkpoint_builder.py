"""One builder makes every model and checkpoint, and a plain BART's new confidence layer
starts the same way on every path."""

import argparse

import torch
from fairseq import checkpoint_utils
from fairseq.models.bart.model import bart_base_architecture

from builders.models import bart_twin, build_tiny
from builders.paged_data import make_dictionary
from pagesum_plugin.checkpoints.builder import build_model, dictionary_directory, save_checkpoint
from pagesum_plugin.checkpoints.hf_weights import fill_model
from pagesum_plugin.systems.pagesum.model import CONFIDENCE_KEYS

DIMENSIONS = ("encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_layers", "encoder_attention_heads",
              "decoder_embed_dim", "decoder_ffn_embed_dim", "decoder_layers", "decoder_attention_heads")


def test_dimensions_come_from_fairseqs_own_architecture(tmp_path):
    args, _, _ = build_model(dictionary_directory(make_dictionary(), tmp_path), "pagesum_bart_base")
    reference = argparse.Namespace()
    bart_base_architecture(reference)
    assert {k: getattr(args, k) for k in DIMENSIONS} == {k: getattr(reference, k) for k in DIMENSIONS}


def test_a_saved_checkpoint_loads_with_fairseq_and_computes_the_same(copy_task_dir, tmp_path):
    args, task, model = build_tiny(copy_task_dir)
    save_checkpoint(tmp_path / "model.pt", args, model)
    (loaded,), _, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(tmp_path / "model.pt")], arg_overrides={"data": copy_task_dir})
    src = torch.full((1, 1, 5), 10)
    src[0, 0, 0], src[0, 0, -1] = task.dictionary.bos(), task.dictionary.eos()
    prev = torch.tensor([[task.dictionary.eos(), task.dictionary.bos(), 11]])
    torch.testing.assert_close(loaded.eval()(src, None, prev)[0], model(src, None, prev)[0])


def test_fine_tuning_from_bart_starts_the_confidence_layer_at_zero(copy_task_dir):
    args, task, model = build_tiny(copy_task_dir)
    state = bart_twin(args, task, model).state_dict()
    model.upgrade_state_dict_named(state, "")
    assert all(torch.count_nonzero(state[key]) == 0 for key in CONFIDENCE_KEYS)


def test_conversion_starts_the_confidence_layer_the_same_way(copy_task_dir):
    args, task, model = build_tiny(copy_task_dir)
    converted = {k: v for k, v in model.state_dict().items() if k not in CONFIDENCE_KEYS}
    fill_model(model, converted, "a plain BART")
    assert all(torch.count_nonzero(model.state_dict()[key]) == 0 for key in CONFIDENCE_KEYS)
