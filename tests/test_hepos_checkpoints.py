"""Initialising hepos models from fairseq BART checkpoints: every weight, longer positions."""

import pytest
import torch

from builders.hepos import build_hepos
from builders.models import bart_twin, save_bart_checkpoint
from pagesum_plugin.checkpoints.safety import load_checkpoint_file

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one CPU thread

BART_POSITIONS = 16  # the checkpoint's source positions (fairseq's table has 2 more rows: the offset)
OFFSET = 2  # padding index 1 + 1: rows 0 and 1 of a learned position table are not positions


@pytest.fixture(scope="module")
def bart_checkpoint(copy_task_dir, tmp_path_factory):
    """A BART checkpoint with 16 source positions, its weights moved away from a fresh init."""
    args, task, model = build_hepos(copy_task_dir, "--max-source-positions", str(BART_POSITIONS))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    bart = bart_twin(args, task, model)
    path = str(tmp_path_factory.mktemp("bart") / "model.pt")
    save_bart_checkpoint(path, bart)
    return path, bart.state_dict()


def load(copy_task_dir, path, *extra_args):
    _, _, model = build_hepos(copy_task_dir, "--max-source-positions", "40", *extra_args, seed=1)
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(load_checkpoint_file(path)["model"], strict=True)
    return model.state_dict(), fresh


@pytest.mark.parametrize("encoder", ["full", "window", "lsh", "sinkhorn"])
def test_every_bart_weight_loads(copy_task_dir, bart_checkpoint, encoder):
    path, bart = bart_checkpoint
    loaded, _ = load(copy_task_dir, path, "--encoder-attention", encoder)
    assert set(loaded) == set(bart)  # nothing new: no sparse attention adds weights
    for key, value in bart.items():
        if key != "encoder.embed_positions.weight":
            assert torch.equal(loaded[key], value), key
    assert torch.equal(loaded["encoder.embed_positions.weight"][: OFFSET + BART_POSITIONS],
                       bart["encoder.embed_positions.weight"])


def test_random_extension_keeps_bart_rows_and_the_offset_and_adds_fresh_ones(copy_task_dir, bart_checkpoint):
    path, bart = bart_checkpoint
    loaded, fresh = load(copy_task_dir, path, "--extend-positions", "random")
    table = loaded["encoder.embed_positions.weight"]
    assert table.shape == (OFFSET + 40, 64)
    assert torch.equal(table[: OFFSET + BART_POSITIONS], bart["encoder.embed_positions.weight"])
    assert torch.equal(table[OFFSET + BART_POSITIONS:], fresh["encoder.embed_positions.weight"][OFFSET + BART_POSITIONS:])


def test_random_extension_draws_new_rows_not_copies_of_bart(copy_task_dir, bart_checkpoint):
    """The paper's choice, where the authors' release copies BART's last position instead."""
    path, bart = bart_checkpoint
    loaded, _ = load(copy_task_dir, path, "--extend-positions", "random")
    new = loaded["encoder.embed_positions.weight"][OFFSET + BART_POSITIONS:]
    assert not (new == bart["encoder.embed_positions.weight"][-1]).all(dim=1).any()
    assert len({tuple(row.tolist()) for row in new}) == len(new)  # each drawn on its own


def test_last_extension_copies_barts_last_position_into_every_new_row_as_the_authors_release(
        copy_task_dir, bart_checkpoint):
    path, bart = bart_checkpoint
    loaded, _ = load(copy_task_dir, path, "--extend-positions", "last")
    table, original = loaded["encoder.embed_positions.weight"], bart["encoder.embed_positions.weight"]
    assert torch.equal(table[: OFFSET + BART_POSITIONS], original)
    assert all(torch.equal(row, original[-1]) for row in table[OFFSET + BART_POSITIONS:])


def test_tile_extension_repeats_bart_positions_along_the_sequence(copy_task_dir, bart_checkpoint):
    path, bart = bart_checkpoint
    loaded, _ = load(copy_task_dir, path, "--extend-positions", "tile")
    table, original = loaded["encoder.embed_positions.weight"], bart["encoder.embed_positions.weight"]
    assert torch.equal(table[:OFFSET], original[:OFFSET])
    for position in range(40):
        assert torch.equal(table[OFFSET + position], original[OFFSET + position % BART_POSITIONS]), position


def test_linformer_projections_are_the_only_fresh_weights(copy_task_dir, bart_checkpoint):
    path, bart = bart_checkpoint
    loaded, fresh = load(copy_task_dir, path, "--cross-attention", "linformer")
    new = set(loaded) - set(bart)
    assert new == {f"decoder.layers.{i}.encoder_attn.compress_{kv}.weight" for i in (0, 1) for kv in "kv"}
    for key in new:
        assert torch.equal(loaded[key], fresh[key])
        assert loaded[key].shape == (10, 40)  # k = max source positions / 4


def test_a_missing_bart_weight_is_an_error_naming_it(copy_task_dir, bart_checkpoint):
    path, _ = bart_checkpoint
    _, _, model = build_hepos(copy_task_dir, "--max-source-positions", "40")
    state = load_checkpoint_file(path)["model"]
    del state["decoder.layers.1.encoder_attn.k_proj.weight"]
    with pytest.raises(RuntimeError, match=r"decoder\.layers\.1\.encoder_attn\.k_proj\.weight"):
        model.load_state_dict(state, strict=True)
