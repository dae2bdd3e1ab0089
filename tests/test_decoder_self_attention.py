"""The decoder self-attention that reorders its cache while extending it computes fairseq's
attention bit for bit, through beam reordering, dropped rows and padded prefixes."""

import torch
from fairseq.modules import MultiheadAttention

from pagesum_plugin.modules.decoder_self_attention import DecoderSelfAttention


def twins(embed_dim=16, heads=4):
    torch.manual_seed(0)
    ours = DecoderSelfAttention(embed_dim, heads, self_attention=True)
    stock = MultiheadAttention(embed_dim, heads, self_attention=True)
    stock.load_state_dict(ours.state_dict())
    return ours.eval(), stock.eval()


def test_steps_with_reordered_duplicated_and_dropped_rows_equal_fairseqs_attention_exactly():
    ours, stock = twins()
    rng = torch.Generator().manual_seed(1)
    rows = 6
    ours_state, stock_state = {}, {}
    with torch.no_grad():
        for step in range(8):
            if step > 0:
                # beams continue other beams (some twice); at step 4 two rows are dropped
                new_rows = rows - 2 if step == 4 else rows
                order = torch.randint(rows, (new_rows,), generator=rng)
                ours.reorder_incremental_state(ours_state, order)
                if step == 2:  # two reorders between writes compose
                    again = torch.randint(new_rows, (new_rows,), generator=rng)
                    ours.reorder_incremental_state(ours_state, again)
                    order = order[again]
                stock.reorder_incremental_state(stock_state, order)
                rows = new_rows
            x = torch.randn(1, rows, 16, generator=rng)  # (tgt_len, rows, dim): one new position
            out, _ = ours(x, x, x, incremental_state=ours_state, need_weights=False)
            expected, _ = stock(x, x, x, incremental_state=stock_state, need_weights=False)
            assert torch.equal(out, expected), step
            cached = ours._get_input_buffer(ours_state)["prev_key"]
            assert torch.equal(cached, stock._get_input_buffer(stock_state)["prev_key"])
            assert cached.shape == (rows, 4, step + 1, 4)


def test_a_step_with_padding_in_the_prefix_takes_fairseqs_path_after_the_pending_reorder():
    ours, stock = twins()
    rng = torch.Generator().manual_seed(2)
    ours_state, stock_state = {}, {}
    with torch.no_grad():
        x = torch.randn(1, 3, 16, generator=rng)
        ours(x, x, x, incremental_state=ours_state)
        stock(x, x, x, incremental_state=stock_state)
        order = torch.tensor([2, 2, 0])
        ours.reorder_incremental_state(ours_state, order)
        stock.reorder_incremental_state(stock_state, order)
        x = torch.randn(1, 3, 16, generator=rng)
        padding = torch.tensor([[False], [True], [False]])  # (rows, tgt_len)
        out, weights = ours(x, x, x, key_padding_mask=padding, incremental_state=ours_state)
        expected, expected_weights = stock(x, x, x, key_padding_mask=padding, incremental_state=stock_state)
    assert torch.equal(out, expected)
    assert torch.equal(weights, expected_weights)


def test_without_an_incremental_state_it_is_fairseqs_attention():
    ours, stock = twins()
    x = torch.randn(5, 2, 16, generator=torch.Generator().manual_seed(3))
    causal = torch.triu(torch.full((5, 5), float("-inf")), 1)
    torch.testing.assert_close(ours(x, x, x, attn_mask=causal)[0], stock(x, x, x, attn_mask=causal)[0], atol=0, rtol=0)
