"""Beam search keeps each page's encoder output once per example, and decodes exactly as
with one copy per beam; the dense path for equal page counts and the top-pages shortcut
decode as the general path does."""

import pytest
import torch

from builders.models import build_tiny, make_source_sensitive, paged_batch, random_pages
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.systems.pagesum.model import PAGE_STATE_KEY
from pagesum_plugin.modules.page_mixing import PageLayout

PAGE_COUNTS = (3, 1, 4, 2, 1)


@pytest.fixture(scope="module")
def sensitive(copy_task_dir):
    """A model whose summaries depend on the pages and end at different lengths."""
    _, task, model = build_tiny(copy_task_dir)
    return task, make_source_sensitive(model, task.dictionary)


def documents(task, page_counts, seed):
    rng = torch.Generator().manual_seed(seed)
    low, high = task.dictionary.nspecial, len(task.dictionary) - 8
    return [random_pages(rng, n, low, high) for n in page_counts]


def make_sample(task, page_lists):
    src = paged_batch(page_lists, task.dictionary)
    return {"id": torch.arange(len(page_lists)), "net_input": {"src_tokens": src}}


def assert_same_hypotheses(ours, reference):
    for ours_hypos, ref_hypos in zip(ours, reference, strict=True):
        assert len(ours_hypos) == len(ref_hypos)
        for h, r in zip(ours_hypos, ref_hypos):
            assert torch.equal(h["tokens"], r["tokens"])
            torch.testing.assert_close(h["score"], r["score"], atol=1e-5, rtol=0)
            torch.testing.assert_close(h["positional_scores"], r["positional_scores"], atol=1e-5, rtol=0)
            torch.testing.assert_close(h["page_weights"], r["page_weights"], atol=1e-5, rtol=0)


def decode_with_one_copy_per_beam(model, generator, sample):
    model.set_beam_size(generator.beam_size, share_pages=False)
    try:
        return generator.generate([model], sample)
    finally:
        model.set_beam_size(generator.beam_size)


@pytest.mark.parametrize("settings", [
    dict(beam_size=4, min_len=2, max_len_b=25),
    dict(beam_size=4, len_penalty=2.0, min_len=4, max_len_b=30, no_repeat_ngram_size=2),
], ids=["short", "long"])
def test_beams_sharing_pages_find_the_same_hypotheses_as_one_copy_per_beam(sensitive, settings):
    task, model = sensitive
    sample = make_sample(task, documents(task, PAGE_COUNTS, seed=3))
    generator = PageSumSequenceGenerator([model], task.dictionary, **settings)
    assert model.encoder.beams_share_pages, "the generator told the model its beam size"
    shared = generator.generate([model], sample)
    assert_same_hypotheses(shared, decode_with_one_copy_per_beam(model, generator, sample))

    lengths = [[len(h["tokens"]) for h in hypos] for hypos in shared]
    assert any(len(set(n_best)) > 1 for n_best in lengths), "beams of one example finished at different steps"
    assert len({max(n_best) for n_best in lengths}) > 1, "examples finished at different steps and were dropped"


def test_the_cross_attention_cache_holds_each_page_once_and_the_self_attention_cache_once_per_beam(sensitive):
    """Every page's cross-attention keys are stored once for all beams; the self-attention cache
    holds one row per page of every beam, except the first layer's, which reads only the summary
    prefix (the same for all pages of a hypothesis) and holds one row per hypothesis."""
    task, model = sensitive
    beam = 4
    src = paged_batch(documents(task, PAGE_COUNTS, seed=4), task.dictionary)
    n_pages = sum(PAGE_COUNTS)
    prefix = torch.full((len(PAGE_COUNTS) * beam, 1), task.dictionary.eos())  # (examples x beam, 1)
    try:
        for shared in (True, False):
            model.set_beam_size(beam, share_pages=shared)
            encoder_out = model.encoder(src)
            new_order = torch.arange(len(PAGE_COUNTS)).repeat_interleave(beam)  # what beam search starts with
            encoder_out = model.encoder.reorder_encoder_out(encoder_out, new_order)
            state = {}
            model.decoder(prefix, encoder_out=encoder_out, incremental_state=state)
            for index, layer in enumerate(model.decoder.layers):
                cross = layer.encoder_attn._get_input_buffer(state)["prev_key"]  # (rows, heads, src_len, head_dim)
                own = layer.self_attn._get_input_buffer(state)["cache_key"]  # (blocks, heads, length, beams, head_dim)
                assert cross.size(0) == (n_pages if shared else n_pages * beam)
                assert own.size(0) * own.size(3) == (len(PAGE_COUNTS) * beam if index == 0 else n_pages * beam)
    finally:
        model.set_beam_size(beam)


def test_incremental_decoding_on_shared_pages_follows_reordered_and_dropped_beams(sensitive):
    """Every step equals a full forward pass of each hypothesis on its own copy of its pages,
    while beam search moves beams within their example and drops a finished example."""
    task, model = sensitive
    beam, counts = 3, (2, 1, 3, 2)
    src = paged_batch(documents(task, counts, seed=5), task.dictionary)  # (examples, max_pages, len)
    rng = torch.Generator().manual_seed(6)
    low, high = task.dictionary.nspecial, len(task.dictionary) - 8
    encoder_out = model.encoder(src)  # one set of pages per example
    examples = torch.arange(len(counts))  # the example each group of beams belongs to
    history = torch.full((len(counts) * beam, 1), task.dictionary.eos())  # (examples x beam, t)
    state = {}
    for step in range(7):
        if step > 0:
            groups = examples.numel()
            keep = torch.arange(groups) if step != 3 else torch.tensor([0, 2, 3])  # step 3 drops the 2nd
            # each new beam continues a random beam of its own example
            new_order = (keep[:, None] * beam + torch.randint(beam, (keep.numel(), beam), generator=rng)).view(-1)
            model.decoder.reorder_incremental_state_scripting(state, new_order)
            history, examples = history[new_order], examples[keep]
            history = torch.cat([history, torch.randint(low, high, (history.size(0), 1), generator=rng)], dim=1)
        logits, extra = model.decoder(history, encoder_out=encoder_out, incremental_state=state)

        full_logits, full_extra = model(src[examples].repeat_interleave(beam, dim=0), None, history)
        torch.testing.assert_close(logits[:, 0], full_logits[:, -1], atol=1e-5, rtol=0)
        width = full_extra["page_weights"].size(1)  # the widest page count still decoded
        torch.testing.assert_close(extra["page_weights"][:, :width, 0], full_extra["page_weights"][:, :, -1],
                                   atol=1e-5, rtol=0)
        assert torch.all(extra["page_weights"][:, width:] == 0)
    assert state[PAGE_STATE_KEY].max_pages == max(counts), "the page-weight width stays fixed while examples drop"


def test_equal_page_counts_take_the_dense_path_and_decode_as_in_a_mixed_batch(sensitive):
    task, model = sensitive
    assert PageLayout(torch.tensor([3, 3, 3]), 4, 9).dense
    assert not PageLayout(torch.tensor([3, 1, 3, 3]), 4, 10).dense
    even = documents(task, (3, 3, 3), seed=7)
    generator = PageSumSequenceGenerator([model], task.dictionary, beam_size=4, min_len=2, max_len_b=20)
    dense = generator.generate([model], make_sample(task, even))
    one_page = documents(task, (1,), seed=8)
    mixed = generator.generate([model], make_sample(task, [even[0], *one_page, even[1], even[2]]))
    assert_same_hypotheses(dense, [mixed[0], mixed[2], mixed[3]])


def test_top_pages_decodes_the_kept_pages_from_their_scoring_pass_as_if_encoded_alone(sensitive):
    task, model = sensitive
    k = 2
    pages = documents(task, (4, 1, 3, 2, 4), seed=9)
    sample = make_sample(task, pages)
    src = sample["net_input"]["src_tokens"]
    # the rule of top_pages: mean page weight over the forced <s> and the first word
    prefix = torch.tensor([[task.dictionary.eos(), task.dictionary.bos()]]).expand(src.size(0), 2)
    _, extra = model(src, None, prefix)
    kept = extra["page_weights"].mean(dim=2).topk(k, dim=1).indices.sort(dim=1).values  # (batch, k)
    kept_pages = [[p[j] for j in kept[i].tolist() if j < len(p)] for i, p in enumerate(pages)]

    settings = dict(beam_size=3, min_len=2, max_len_b=20)
    passes = []  # every encoder pass, whichever way the encoder is called
    encode = model.encoder.forward

    def counted(*args, **kwargs):
        passes.append(args[0] if args else kwargs["src_tokens"])
        return encode(*args, **kwargs)

    model.encoder.forward = counted
    try:
        pruned = PageSumSequenceGenerator([model], task.dictionary, top_pages=k, **settings).generate([model], sample)
    finally:
        del model.encoder.forward
    assert len(passes) == 1 and passes[0] is src, "every page is encoded once, by the scoring pass"

    alone_sample = make_sample(task, kept_pages)
    alone = PageSumSequenceGenerator([model], task.dictionary, **settings).generate([model], alone_sample)
    for i, (ours_hypos, ref_hypos) in enumerate(zip(pruned, alone)):
        kept_here = [j for j in kept[i].tolist() if j < len(pages[i])]
        for h, r in zip(ours_hypos, ref_hypos, strict=True):
            assert torch.equal(h["tokens"], r["tokens"])
            torch.testing.assert_close(h["score"], r["score"], atol=1e-5, rtol=0)
            torch.testing.assert_close(h["positional_scores"], r["positional_scores"], atol=1e-5, rtol=0)
            # page weights come back in the document's page numbering, 0 on the pages dropped
            assert h["page_weights"].size(1) == len(pages[i])
            torch.testing.assert_close(h["page_weights"][:, kept_here], r["page_weights"], atol=1e-5, rtol=0)
            assert h["page_weights"].sum(dim=1).sub(1).abs().max() < 1e-5


@pytest.mark.parametrize("page_counts", [[3, 3], [3, 1, 2]], ids=["dense", "gathered"])
@pytest.mark.parametrize("beams", [1, 3])
def test_a_decoding_steps_mix_equals_the_full_passes_at_that_position(page_counts, beams):
    """Eq. 8 and 9 at one position (a decoding step's own path: one product and one sum, the
    states read in place) give what the full pass's mix gives at that position: the mixed
    states and the page weights, for every page layout."""
    counts = torch.tensor(page_counts)
    layout = PageLayout(counts, beams, int(counts.sum()))
    rng = torch.Generator().manual_seed(13)
    rows = layout.n_pages * beams
    hidden = torch.randn(rows, 3, 8, generator=rng)  # (page rows, tgt_len, dim)
    confidences = torch.randn(rows, 3, generator=rng)  # (page rows, tgt_len)
    mixed, weights = layout.mix(hidden, confidences)
    for position in range(3):
        step_mixed, step_weights = layout.mix(hidden[:, position : position + 1],
                                              confidences[:, position : position + 1])
        torch.testing.assert_close(step_mixed, mixed[:, position : position + 1], atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(step_weights, weights[:, :, position : position + 1], atol=1e-7, rtol=1e-6)
    assert layout.dense == (len(set(page_counts)) == 1)


@pytest.mark.parametrize("page_counts", [[3, 3], [3, 1, 2]], ids=["dense", "gathered"])
def test_a_reorder_that_drops_no_example_moves_each_page_row_to_the_beam_it_follows(page_counts):
    """Beams that only trade places within their example: every page row continues the row of
    the same group and page of the beam it follows (the layout, and the packed pages, stay)."""
    beams = 3
    counts = torch.tensor(page_counts)
    layout = PageLayout(counts, beams, int(counts.sum()))
    rng = torch.Generator().manual_seed(14)
    examples = torch.arange(len(page_counts)).repeat_interleave(beams)
    new_order = examples * beams + torch.randint(beams, (len(examples),), generator=rng)  # (hypotheses,)
    kept, row_order, page_order = layout.reorder(new_order)
    assert kept is layout and page_order is None
    old_beam = new_order.index_select(0, layout.hypothesis_of_row) % beams  # (page rows,)
    expected = (layout.first_page[layout.group_of_page.repeat_interleave(beams)] + layout.page_of_row) * beams \
        + old_beam
    assert torch.equal(row_order, expected)
