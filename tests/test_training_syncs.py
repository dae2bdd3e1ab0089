"""A training forward pass waits for the device a fixed number of times, whatever the depth of
the model: fairseq's encoder asks the device whether the source holds padding before every
layer, every system here asks once (``systems/bart/model.SyncFreeEncoder``) and computes what
fairseq computes (the systems' equivalence tests); HED's layers select each document's tokens
through indices its layout computed once; AWESOME's memory layers know on the host that their
slots are filled, and HED's decoder reads the documents' shapes back once for all its
cross-attentions."""

import pytest

from builders.awesome import build_awesome
from builders.hed import build_hed
from builders.hepos import SMALL_PATTERNS, build_hepos
from builders.models import build_tiny, decoder_input
from builders.systems import SUMMARIES, TRAINED_SYSTEMS
from pagesum_recipes.profiling import HostSyncs

pytestmark = pytest.mark.usefixtures("one_thread")

BUILDERS = {
    "pagesum": lambda d, *flags: build_tiny(d, *flags),
    "hepos": lambda d, *flags: build_hepos(d, "--encoder-attention", "window", *SMALL_PATTERNS, *flags),
    "hed": lambda d, *flags: build_hed(d, *flags),
    "awesome": lambda d, *flags: build_awesome(d, "--memory", "attentive", *flags),
}


def forward_syncs(name, data_dir, layers):
    """Where a training forward pass made the host wait, at ``layers`` encoder and decoder layers."""
    _, task, model = BUILDERS[name](data_dir, "--encoder-layers", str(layers), "--decoder-layers", str(layers))
    src = TRAINED_SYSTEMS[name][1](task)  # pages, a flat source, documents or a segment per row
    _, prev = decoder_input(SUMMARIES[: len(src)], task.dictionary)
    model.train()
    with HostSyncs() as syncs:
        model(src, None, prev)
    return syncs.seen


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_the_waits_for_the_device_do_not_grow_with_the_layers(name, copy_task_dir):
    shallow, deep = forward_syncs(name, copy_task_dir, 2), forward_syncs(name, copy_task_dir, 6)
    assert len(deep) == len(shallow), f"{len(shallow)} waits at 2 layers, {len(deep)} at 6: {deep}"
