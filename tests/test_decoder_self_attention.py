"""The decoder self-attention computes fairseq's attention (to rounding) while its cache is
written once per position and beams reorder through its index table, through beam
reordering, dropped examples, padded prefixes and the full (training) pass."""

import math

import pytest
import torch
from fairseq.modules import MultiheadAttention

from benchmarks.common import Launched
from pagesum_plugin.modules.decoder_self_attention import (DecoderSelfAttention, attend_through_table, gather_rows,
                                                           read_mask)
from pagesum_plugin.modules.decoding_step import declare_unpadded_prefixes, set_step_position
from pagesum_plugin.modules.page_mixing import PageLayout

EMBED, HEADS = 16, 4


def twins(beams=None, cache_length=4):
    torch.manual_seed(0)
    ours = DecoderSelfAttention(EMBED, HEADS, self_attention=True)
    stock = MultiheadAttention(EMBED, HEADS, self_attention=True)
    stock.load_state_dict(ours.state_dict())
    ours.beams, ours.cache_length = beams, cache_length
    return ours.eval(), stock.eval()


def within_blocks(rows: int, beams: int, rng) -> torch.Tensor:
    """A beam-search order: every row continues a random beam of its own block."""
    blocks = torch.arange(rows // beams).repeat_interleave(beams)
    return blocks * beams + torch.randint(beams, (rows,), generator=rng)


def decode(ours, stock, rows, orders, rng, steps=9, ours_state=None, padded=False):
    """Run both modules step by step; ``orders(step, rows)`` gives each reorder (or None).
    ``ours_state``: the search's decoding state to start from; ``padded``: every step is handed
    the new position's padding mask (nothing is padding), as the decoder hands it."""
    ours_state, stock_state = {} if ours_state is None else ours_state, {}
    storages = set()
    with torch.no_grad():
        for step in range(steps):
            order = orders(step, rows) if step else None
            if order is not None:
                ours.reorder_incremental_state(ours_state, order)
                stock.reorder_incremental_state(stock_state, order)
                rows = order.numel()
            x = torch.randn(1, rows, EMBED, generator=rng)  # (tgt_len, rows, dim): one new position
            padding = torch.zeros(rows, 1, dtype=torch.bool) if padded else None  # (rows, tgt_len)
            out, _ = ours(x, x, x, key_padding_mask=padding, incremental_state=ours_state, need_weights=False)
            expected, _ = stock(x, x, x, key_padding_mask=padding, incremental_state=stock_state, need_weights=False)
            torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6, msg=f"step {step}")
            storages.add(ours._get_input_buffer(ours_state)["cache_key"].data_ptr())
    return storages


def test_beams_reordered_within_their_blocks_read_through_the_table_and_equal_fairseqs_attention():
    ours, stock = twins(beams=3, cache_length=16)
    rng = torch.Generator().manual_seed(1)
    storages = decode(ours, stock, 12, lambda step, rows: within_blocks(rows, 3, rng), rng)
    assert len(storages) == 1, "the cache was written in place, never copied"


def test_dropped_blocks_leave_the_cache_and_the_rest_still_reads_through_the_table():
    ours, stock = twins(beams=2, cache_length=16)
    rng = torch.Generator().manual_seed(2)

    def orders(step, rows):
        order = within_blocks(rows, 2, rng)
        if step == 4:  # the 2nd of the remaining examples finished
            order = order.view(-1, 2)[torch.tensor([0, 2, 3])].view(-1)
        return order

    decode(ours, stock, 8, orders, rng)


def test_two_reorders_between_writes_compose():
    ours, stock = twins(beams=4, cache_length=16)
    rng = torch.Generator().manual_seed(3)
    ours_state, stock_state = {}, {}
    with torch.no_grad():
        for step in range(5):
            if step:
                for _ in range(2):
                    order = within_blocks(8, 4, rng)
                    ours.reorder_incremental_state(ours_state, order)
                    stock.reorder_incremental_state(stock_state, order)
            x = torch.randn(1, 8, EMBED, generator=rng)
            out = ours(x, x, x, incremental_state=ours_state, need_weights=False)[0]
            torch.testing.assert_close(out, stock(x, x, x, incremental_state=stock_state, need_weights=False)[0],
                                       atol=1e-6, rtol=1e-6)


def test_without_known_blocks_any_order_moves_the_rows_and_equals_fairseqs_attention():
    ours, stock = twins(beams=None, cache_length=16)
    rng = torch.Generator().manual_seed(4)

    def orders(step, rows):
        return torch.randint(rows, (rows - 2 if step == 4 else rows,), generator=rng)

    decode(ours, stock, 6, orders, rng)


def test_a_search_longer_than_the_preallocated_cache_grows_it():
    ours, stock = twins(beams=2, cache_length=3)
    rng = torch.Generator().manual_seed(5)
    storages = decode(ours, stock, 4, lambda step, rows: within_blocks(rows, 2, rng), rng, steps=10)
    assert len(storages) == 3, "3 -> 6 -> 12 positions: two rare copies in ten steps"


def test_a_step_with_padding_in_the_prefix_masks_it_as_fairseq_does():
    ours, stock = twins(beams=3, cache_length=8)
    rng = torch.Generator().manual_seed(6)
    ours_state, stock_state = {}, {}
    with torch.no_grad():
        for _ in range(3):
            order = within_blocks(3, 3, rng)
            x = torch.randn(1, 3, EMBED, generator=rng)
            ours(x, x, x, incremental_state=ours_state)
            stock(x, x, x, incremental_state=stock_state)
            ours.reorder_incremental_state(ours_state, order)
            stock.reorder_incremental_state(stock_state, order)
        x = torch.randn(1, 3, EMBED, generator=rng)
        padding = torch.tensor([[False], [True], [False]])  # (rows, tgt_len)
        out, weights = ours(x, x, x, key_padding_mask=padding, incremental_state=ours_state)
        expected, expected_weights = stock(x, x, x, key_padding_mask=padding, incremental_state=stock_state)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("padded", [False, True], ids=["no-padding-mask", "padding-mask"])
def test_steps_at_a_position_tensor_write_and_read_the_cache_in_place_and_equal_fairseqs_attention(padded):
    """The fixed-shape step (a captured search's) keeps its cache from the first step on, with
    or without a padding mask to keep beside it."""
    ours, stock = twins(beams=2, cache_length=8)
    ours.fixed_shapes = True
    rng = torch.Generator().manual_seed(8)
    state, position = {}, torch.zeros((), dtype=torch.long)
    set_step_position(state, position)

    def orders(step, rows):  # the search advances the position before each step after the first
        position.add_(1)
        return within_blocks(rows, 2, rng)

    storages = decode(ours, stock, 4, orders, rng, steps=6, ours_state=state, padded=padded)
    assert len(storages) == 1, "one cache, allocated at the first step"


def test_a_search_that_declares_its_prefixes_unpadded_spends_no_operator_on_the_padding_mask():
    """The decoder hands every step the new position's padding mask (asking whether it holds any
    would make the host wait); a search whose prefixes never hold padding says so once, and its
    steps then launch what steps handed no mask launch."""

    def operators_of_a_step(padded: bool, declared: bool) -> int:
        ours, stock = twins(beams=2, cache_length=8)
        rng = torch.Generator().manual_seed(9)
        state = {}
        if declared:
            declare_unpadded_prefixes(state)
        decode(ours, stock, 4, lambda step, rows: within_blocks(rows, 2, rng), rng, steps=3, ours_state=state,
               padded=padded)  # and equal to fairseq's
        x = torch.randn(1, 4, EMBED, generator=rng)
        padding = torch.zeros(4, 1, dtype=torch.bool) if padded else None
        with torch.no_grad(), Launched() as counter:
            ours(x, x, x, key_padding_mask=padding, incremental_state=state, need_weights=False)
        return counter.operators

    unmasked = operators_of_a_step(padded=False, declared=False)
    assert operators_of_a_step(padded=True, declared=True) == unmasked < operators_of_a_step(padded=True,
                                                                                               declared=False)


def test_the_read_through_the_table_equals_attention_over_each_rows_own_gathered_keys():
    """The one SDPA call over every beam of a block, masked by the table, is the dense attention
    of each row over the keys it follows (``gather_rows``), with and without a padded position
    and for several queries a row."""
    rng = torch.Generator().manual_seed(12)
    blocks, heads, length, beams, head_dim, tgt_len = 3, 2, 6, 4, 8, 2
    keys, values = (torch.randn(blocks, heads, length, beams, head_dim, generator=rng) for _ in range(2))
    table = torch.randint(beams, (blocks * beams, length), generator=rng)  # (rows, length)
    padding = torch.zeros(blocks * beams, length, dtype=torch.bool)
    padding[5, 2] = True
    readable = torch.full((blocks * beams, length, beams), -math.inf).scatter(2, table[:, :, None], 0.0)
    readable = readable.masked_fill(padding[:, :, None], -math.inf)
    start = length - tgt_len
    q = torch.randn(blocks, heads, tgt_len * beams, head_dim, generator=rng)  # queries (tgt_len, beams) in a block
    out, probs = attend_through_table(q, keys, values, read_mask(readable, beams, start))
    dense_out, dense_probs = attend_through_table(q, keys, values, read_mask(readable, beams, start), need_probs=True)

    # the reference: each row's own keys, gathered, and a causal, padded softmax attention
    own_keys, own_values = gather_rows(keys, table), gather_rows(values, table)  # (rows, heads, length, head_dim)
    rows_q = q.view(blocks, heads, tgt_len, beams, head_dim).permute(0, 3, 1, 2, 4).reshape(
        blocks * beams, heads, tgt_len, head_dim)
    causal = torch.arange(length)[None, :] > torch.arange(start, length)[:, None]  # (tgt_len, length)
    scores = (rows_q @ own_keys.transpose(-1, -2)).masked_fill(causal | padding[:, None, None, :], -math.inf)
    weights = scores.softmax(-1)  # (rows, heads, tgt_len, length)
    expected = (weights @ own_values).view(blocks, beams, heads, tgt_len, head_dim).permute(0, 2, 3, 1, 4).reshape(
        blocks, heads, tgt_len * beams, head_dim)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dense_out, expected, atol=1e-5, rtol=1e-5)
    assert probs is None
    expected_probs = weights.view(blocks, beams, heads, tgt_len, length).permute(0, 2, 3, 1, 4).reshape(
        blocks, heads, tgt_len * beams, length)
    torch.testing.assert_close(dense_probs, expected_probs, atol=1e-6, rtol=1e-6)


def test_a_step_projects_its_rows_once_through_the_fused_projections():
    ours, stock = twins(beams=2, cache_length=8)
    rng = torch.Generator().manual_seed(10)
    state = {}
    decode(ours, stock, 4, lambda step, rows: within_blocks(rows, 2, rng), rng, steps=3, ours_state=state)
    buffer = ours._get_input_buffer(state)
    assert buffer["qkv_weight"].shape == (EMBED, 3 * EMBED) and buffer["qkv_bias"].shape == (3 * EMBED,)


def test_a_projection_with_a_hook_of_its_own_is_called_as_itself_not_fused():
    ours, stock = twins(beams=2, cache_length=8)
    calls = []
    ours.k_proj.register_forward_hook(lambda module, args, out: calls.append(out.shape))
    rng = torch.Generator().manual_seed(11)
    state = {}
    decode(ours, stock, 4, lambda step, rows: within_blocks(rows, 2, rng), rng, steps=3, ours_state=state)
    assert len(calls) == 3 and "qkv_weight" not in ours._get_input_buffer(state)


def test_a_cached_step_gives_its_weights_when_asked():
    ours, stock = twins(beams=2, cache_length=8)
    rng = torch.Generator().manual_seed(7)
    ours_state, stock_state = {}, {}
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(1, 4, EMBED, generator=rng)
            out, weights = ours(x, x, x, incremental_state=ours_state, need_weights=True)
            expected, expected_weights = stock(x, x, x, incremental_state=stock_state, need_weights=True)
    torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=1e-6)


def test_rows_that_repeat_their_hypothesis_are_cached_once_per_hypothesis_and_equal_fairseqs_attention_per_row():
    """PageSum's first decoder layer sees each hypothesis's prefix once per page. Told so
    (``share_rows``), the attention caches one row per hypothesis; every page row still gets
    what fairseq's attention computes on it, through reordered beams, a finished example,
    the weights on request, and an unusual step (an attention mask) that continues per row."""
    ours, stock = twins(beams=3, cache_length=16)
    rng = torch.Generator().manual_seed(9)
    layout = PageLayout(torch.tensor([2, 3, 1]), beams=3, n_pages=6)  # rows: (example x page x beam)
    ours_state, stock_state = {}, {}
    with torch.no_grad():
        for step in range(8):
            if step == 0:
                ours.share_rows(ours_state, layout.first_row_of_hypothesis, layout.hypothesis_of_row)
            else:
                order = within_blocks(layout.hypotheses, 3, rng)
                if step == 4:  # the 2nd example finished
                    order = order.view(-1, 3)[torch.tensor([0, 2])].view(-1)
                layout, row_order, _ = layout.reorder(order)
                ours.reorder_groups(ours_state, order, row_order, layout.first_row_of_hypothesis,
                                    layout.hypothesis_of_row)
                stock.reorder_incremental_state(stock_state, row_order)
            x = layout.expand(torch.randn(layout.hypotheses, 1, EMBED, generator=rng)).transpose(0, 1)  # (1, rows, dim)
            unusual = torch.zeros(1, step + 1) if step == 6 else None  # a step fairseq's attention must take
            out, weights = ours(x, x, x, incremental_state=ours_state, attn_mask=unusual, need_weights=True)
            expected, expected_weights = stock(x, x, x, incremental_state=stock_state, attn_mask=unusual,
                                               need_weights=True)
            torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6, msg=f"step {step}")
            torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=1e-6, msg=f"step {step}")
            if step < 6:
                cache = ours._get_input_buffer(ours_state)["cache_key"]  # (blocks, heads, length, beams, head_dim)
                assert cache.size(0) * cache.size(3) == layout.hypotheses < x.size(1)


@pytest.mark.parametrize("padded", [False, True])
def test_the_full_pass_through_sdpa_equals_fairseqs_attention_and_its_gradients(padded):
    ours, stock = twins()
    x = torch.randn(5, 3, EMBED, generator=torch.Generator().manual_seed(8), requires_grad=True)
    causal = torch.triu(torch.full((5, 5), float("-inf")), 1)
    padding = torch.zeros(3, 5, dtype=torch.bool)
    if padded:
        padding[1, 3:] = True  # a shorter summary, right-padded
    mask = padding if padded else None
    out = ours(x, x, x, key_padding_mask=mask, attn_mask=causal, need_weights=False)[0]
    expected = stock(x, x, x, key_padding_mask=mask, attn_mask=causal, need_weights=False)[0]
    real = ~padding.t()[:, :, None]  # (tgt_len, rows, 1): positions a loss reads
    torch.testing.assert_close(out * real, expected * real, atol=1e-6, rtol=1e-6)
    grads = torch.autograd.grad((out * real).sum(), [x] + list(ours.parameters()))
    expected_grads = torch.autograd.grad((expected * real).sum(), [x] + list(stock.parameters()))
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("padded", [False, True])
def test_the_full_pass_asks_sdpa_for_causal_attention_and_passes_no_mask(padded, monkeypatch):
    """fairseq's causal mask, with or without the summaries' padding, becomes SDPA's
    ``is_causal``: with no mask to read, SDPA may take its flash kernel on CUDA
    (``test_cuda.py``), which computes only the blocks at or below the diagonal."""
    ours, _ = twins()
    calls = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    x = torch.randn(5, 3, EMBED)
    padding = torch.zeros(3, 5, dtype=torch.bool)
    padding[1, 3:] = padded
    ours(x, x, x, key_padding_mask=padding, attn_mask=torch.triu(torch.full((5, 5), -math.inf), 1), need_weights=False)
    assert [(call.get("attn_mask"), call.get("is_causal")) for call in calls] == [(None, True)]


def kept_token_tensors(module, x: torch.Tensor) -> int:
    """How many (tgt_len, rows, dim)-sized tensors the full pass keeps for backward, each storage once."""
    storages = set()

    def pack(tensor):
        if tensor.numel() == x.numel():
            storages.add(tensor.untyped_storage().data_ptr())
        return tensor

    causal = torch.triu(torch.full((x.size(0), x.size(0)), float("-inf")), 1)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        module(x, x, x, attn_mask=causal, need_weights=False)
    return len(storages)


def test_a_transposed_input_is_copied_once_for_the_three_projections_not_once_each():
    """The first decoder layer's input is the embeddings transposed (not contiguous): fairseq's
    attention keeps a contiguous copy per projection, this one one copy for the three."""
    ours, stock = twins()
    x = torch.randn(3, 5, EMBED, requires_grad=True).transpose(0, 1)  # (tgt_len, rows, dim), not contiguous
    read = []
    for projection in (ours.q_proj, ours.k_proj, ours.v_proj):
        projection.register_forward_hook(lambda module, args, out: read.append(args[0]))
    kept, stock_kept = kept_token_tensors(ours.train(), x), kept_token_tensors(stock.train(), x)
    assert len({t.untyped_storage().data_ptr() for t in read}) == 1 and read[0].is_contiguous()
    assert kept == stock_kept - 2  # the copy, q, k, v and the attention's output
