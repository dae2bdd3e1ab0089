"""A decoding step waits for the device only where the search needs an answer: the decoder
step of every system and the n-gram blocker read nothing back (no scalar, no data-dependent
shape), and a step of the search reads back one thing, which hypotheses ended, plus fairseq's
finalization when some did and its prefix handling at the forced <s>: the table of
docs/benchmarks/decoding_syncs.md."""

import inspect
import linecache

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from builders.hepos import SMALL_PATTERNS, build_hepos
from builders.models import build_tiny, make_source_sensitive, paged_batch, random_pages, vocab
from builders.hed import build_hed
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.generation import search_loop
from pagesum_plugin.generation.ngram_blocking import ban_repeated_ngrams
from pagesum_plugin.modules.page_mixing import PageLayout
from pagesum_recipes.profiling import HostSyncs


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


def build(system, data_dir, page_counts=(2, 3)):
    """(task, model, src_tokens) of a tiny ``system`` and a batch of examples of ``page_counts``."""
    if system == "pagesum":
        _, task, model = build_tiny(data_dir)
    elif system == "hepos":
        _, task, model = build_hepos(data_dir, "--encoder-attention", "window", *SMALL_PATTERNS)
    else:
        _, task, model = build_hed(data_dir)
    rng = torch.Generator().manual_seed(1)
    low, high = vocab(task.dictionary)
    src = paged_batch([random_pages(rng, n, low, high) for n in page_counts], task.dictionary)
    return task, model, src[:, :1] if system == "hepos" else src


@pytest.mark.parametrize("system", ["pagesum", "hepos", "hed"])
def test_a_decoder_step_reads_nothing_back_from_the_device(system, copy_task_dir):
    _, model, src = build(system, copy_task_dir)
    assert steps(model, src) == [[]] * 5


def search_syncs(model, generator, src):
    """The host syncs of one search, cut where each step's decoder call starts: [the set-up's,
    step 0's (up to step 1's decoder call), step 1's, ...]."""
    syncs, starts = HostSyncs(), []
    hook = model.decoder.layers[0].register_forward_pre_hook(lambda module, args: starts.append(len(syncs.seen)))
    try:
        with torch.no_grad(), syncs:
            generator.generate([model], {"net_input": {"src_tokens": src}})
    finally:
        hook.remove()
    bounds = [0, *starts, len(syncs.seen)]
    return [syncs.seen[a:b] for a, b in zip(bounds, bounds[1:])]


def the_read_back():
    """The call site of the one sync every step makes: which hypotheses ended."""
    path = inspect.getsourcefile(search_loop)
    line = next(n for n in range(1, 1000) if ".nonzero(" in linecache.getline(path, n))
    return ("nonzero", f"pagesum_plugin/generation/search_loop.py:{line}")


def in_function(place, function):
    """Whether a call site ``package/file.py:line`` lies inside ``function``."""
    lines, first = inspect.getsourcelines(function)
    path, line = place.rsplit(":", 1)
    return inspect.getsourcefile(function).endswith(path) and first <= int(line) < first + len(lines)


@pytest.mark.parametrize("system", ["pagesum", "hepos", "hed"])
def test_a_search_step_reads_back_only_which_hypotheses_ended(system, copy_task_dir):
    """A search of a forced length: every step but the first (the forced <s>, through fairseq's
    prefix handling; HED also lays its keys out per document there) and the last (where every
    hypothesis ends and is finalized, and the n-best lists are sorted) makes exactly one sync."""
    task, model, src = build(system, copy_task_dir)
    generator = PageSumSequenceGenerator([model], task.dictionary, beam_size=3, min_len=6, max_len_b=6,
                                         no_repeat_ngram_size=3)
    _, first, *middle, last = search_syncs(model, generator, src)
    assert len(middle) == 6  # the 6 summary tokens; the forced <s> comes before them, </s> after
    assert middle == [[the_read_back()]] * 6
    assert the_read_back() in first and the_read_back() in last
    layers = ("pagesum_plugin/modules/", "pagesum_plugin/systems/hed/attention.py")  # HED's per-document key layout
    assert all(in_function(place, SequenceGenerator._prefix_tokens) or place.startswith(layers)
               for operator, place in first if (operator, place) != the_read_back())
    assert all(in_function(place, SequenceGenerator.finalize_hypos) or in_function(place, search_loop.best_first)
               for operator, place in last if (operator, place) != the_read_back())


def test_a_step_finalizes_on_the_host_only_when_some_hypothesis_ended(copy_task_dir):
    """Examples that end at different steps: each step reads back which hypotheses ended, and
    only the steps where some did run fairseq's finalization, and, where that drops an example,
    the page layout of the examples left (its page count sizes the decoder's next step)."""
    task, model, src = build("pagesum", copy_task_dir, page_counts=(3, 1, 4, 2, 1))
    model = make_source_sensitive(model, task.dictionary)
    generator = PageSumSequenceGenerator([model], task.dictionary, beam_size=4, min_len=2, max_len_b=25)
    _, *steps_syncs = search_syncs(model, generator, src)
    finalizing = 0
    for syncs in steps_syncs[1:-1]:  # after the forced <s>, before the sorting of the n-best lists
        assert syncs[0] == the_read_back()
        assert all(in_function(place, SequenceGenerator.finalize_hypos) or in_function(place, PageLayout.reorder)
                   or in_function(place, PageLayout.__init__) for _, place in syncs[1:])
        finalizing += len(syncs) > 1
    assert 1 < finalizing < len(steps_syncs) - 2, "hypotheses ended at several steps, not at every step"


def test_the_ngram_blocker_reads_nothing_back_from_the_device():
    history = torch.randint(4, 9, (6, 30), generator=torch.Generator().manual_seed(2))
    with HostSyncs() as syncs:
        ban_repeated_ngrams(history, torch.zeros(6, 12), 3)
    assert syncs.seen == []
