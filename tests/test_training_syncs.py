"""A training forward pass waits for the device a fixed number of times, whatever the depth of the
model: fairseq's encoder asks the device whether the source holds padding before every layer,
every system here asks once (``systems/bart/model.SyncFreeEncoder``) and computes what fairseq
computes (the systems' equivalence tests); HED works its documents' layout out on the host from
one read-back, and hands its decoder the documents' shapes with it; AWESOME's memory layers know
on the host that their slots are filled. No decoder
asks whether the summaries hold padding (``SyncFreeDecoder``): its causal self-attention never
reads the padding after a summary. PageSum waits once, for its pages."""

import pytest
import torch

from builders.awesome import build_awesome
from builders.hed import build_hed
from builders.hepos import SMALL_PATTERNS, build_hepos
from builders.models import build_tiny, decoder_input
from builders.systems import SUMMARIES, TRAINED_SYSTEMS, pages
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


@pytest.mark.parametrize("page_counts", [(3, 1, 4, 2), (4, 4, 4, 4)], ids=["padding pages", "every page real"])
def test_pagesum_reads_back_once_for_its_pages_and_never_for_the_summarys_padding(page_counts, copy_task_dir):
    """One read-back tells the encoder how many pages to pack, the columns to keep, whether any
    page holds padding, and the decoder's page layout the fewest and most pages of an example;
    the summaries are padded (``SUMMARIES`` differ in length), and nothing asks about it."""
    _, task, model = build_tiny(copy_task_dir)
    src, (_, prev) = pages(task, page_counts), decoder_input(SUMMARIES, task.dictionary)
    assert prev.eq(task.dictionary.pad()).any()
    with HostSyncs() as syncs:
        model.train()(src, None, prev)
    assert [operator for operator, _ in syncs.seen] == ["tolist"]
    assert syncs.seen[0][1].startswith("pagesum_plugin/systems/pagesum/model.py:")


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_a_decoders_training_pass_over_padded_summaries_never_waits_for_the_device(name, copy_task_dir):
    """The encoder's output says all a decoder needs (HED's: its documents' shapes, known on the
    host), so the decoder's pass runs without a wait, padding or not."""
    _, task, model = BUILDERS[name](copy_task_dir)
    src = TRAINED_SYSTEMS[name][1](task)
    _, prev = decoder_input(SUMMARIES[: len(src)], task.dictionary)
    assert prev.eq(task.dictionary.pad()).any()
    model.train()
    encoder_out = model.encoder(src)
    with HostSyncs() as syncs:
        model.decoder(prev, encoder_out=encoder_out)
    assert syncs.seen == []


def test_hed_reads_back_once_for_its_documents_layout_and_its_decoders_shapes(copy_task_dir):
    """The encoder's layout is worked out on the host from one list of the documents' lengths;
    the decoder's cross-attentions lay their keys out by the documents' shapes, which that
    layout already knows."""
    _, task, model = build_hed(copy_task_dir)
    src = TRAINED_SYSTEMS["hed"][1](task)
    _, prev = decoder_input(SUMMARIES, task.dictionary)
    with HostSyncs() as syncs:
        model.train()(src, None, prev)
    assert [operator for operator, _ in syncs.seen] == ["tolist"]
    assert syncs.seen[0][1].startswith("pagesum_plugin/systems/hed/attention.py:")


def test_the_sync_counter_sees_a_list_read_back_and_a_repeat_of_unknown_size():
    counts = torch.tensor([2, 1, 3])
    with HostSyncs() as syncs:
        counts.tolist()
        torch.repeat_interleave(counts)
        torch.repeat_interleave(counts, output_size=6)  # told its size: on CUDA it does not wait
    assert [operator for operator, _ in syncs.seen] == ["tolist", "repeat_interleave"]
    assert counts.tolist() == [2, 1, 3]  # and tensors read back as before, once it is gone
