"""A decoding step waits for the device only where the search needs an answer: the decoder
step of every system and the n-gram blocker read nothing back (no scalar, no data-dependent
shape), and the search's own waits are the ones listed in BENCHMARKS.md."""

import pytest
import torch

from builders.hepos import SMALL_PATTERNS, build_hepos
from builders.models import build_tiny, make_source_sensitive, paged_batch, random_pages, vocab
from builders.hed import build_hed
from pagesum_plugin.generation.ngram_blocking import ban_repeated_ngrams
from pagesum_plugin.profiling import HostSyncs

def steps(model, src, beam=3, n_steps=5, seed=0):
    """Decode ``n_steps`` steps by hand as beam search does; returns the syncs of each step's
    reorder and decoder call (after the first step, which builds the caches)."""
    model.set_beam_size(beam)
    encoder_out = model.encoder(src)
    rows = src.size(0) * beam
    tokens = torch.full((rows, 1), 2)
    state, counts = {}, []
    rng = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.decoder(tokens, encoder_out=encoder_out, incremental_state=state)
        for _ in range(n_steps):
            order = (torch.arange(rows) // beam) * beam + torch.randint(beam, (rows,), generator=rng)
            tokens = torch.cat([tokens[order], torch.randint(4, 20, (rows, 1), generator=rng)], dim=1)
            with HostSyncs() as syncs:
                model.decoder.reorder_incremental_state_scripting(state, order)
                model.decoder(tokens, encoder_out=encoder_out, incremental_state=state)
            counts.append(syncs.seen)
    return counts


@pytest.mark.parametrize("system", ["pagesum", "hepos", "hed"])
def test_a_decoder_step_reads_nothing_back_from_the_device(system, copy_task_dir):
    if system == "pagesum":
        _, task, model = build_tiny(copy_task_dir)
    elif system == "hepos":
        _, task, model = build_hepos(copy_task_dir, "--encoder-attention", "window", *SMALL_PATTERNS)
    else:
        _, task, model = build_hed(copy_task_dir)
    rng = torch.Generator().manual_seed(1)
    low, high = vocab(task.dictionary)
    src = paged_batch([random_pages(rng, n, low, high) for n in (2, 3)], task.dictionary)
    if system == "hepos":
        src = src[:, :1]
    assert steps(model, src) == [[]] * 5


def test_the_ngram_blocker_reads_nothing_back_from_the_device():
    history = torch.randint(4, 9, (6, 30), generator=torch.Generator().manual_seed(2))
    with HostSyncs() as syncs:
        ban_repeated_ngrams(history, torch.zeros(6, 12), 3)
    assert syncs.seen == []
