"""Encoder self-attentions (Section 2): each pattern against a dense masked reference."""

import pytest
import torch

from builders.hepos import (
    attention_like,
    dense_attention,
    merge_heads,
    per_head,
    single_thread,
    stock_attention,
)
from pagesum_plugin.modules.efficient_attention import (
    LSHAttention,
    SinkhornAttention,
    SlidingWindowAttention,
    lsh_buckets,
    sinkhorn_attention,
    sinkhorn_block_sort,
)

DIM, HEADS = 32, 4


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    with single_thread():
        yield


def states(batch=3, length=37, seed=0, pad_from=None):
    """x (len, batch, dim) and its padding (batch, len)."""
    x = torch.randn(length, batch, DIM, generator=torch.Generator().manual_seed(seed))
    padding = torch.zeros(batch, length, dtype=torch.bool)
    for row, start in (pad_from or {}).items():
        padding[row, start:] = True
    return x, padding


def variant(cls, seed=0, **kwargs):
    return attention_like(stock_attention(DIM, HEADS, seed, self_attention=True), cls, **kwargs)


def dense(module, x, padding, allowed):
    """The module's projections around softmax(q k^T) v on the allowed pairs."""
    q, k, v = (per_head(module, x, w) for w in "qkv")
    return merge_heads(module, dense_attention(q, k, v, allowed, padding))


def at_real_positions(out, padding):
    """(len, batch, dim) outputs with those at padding positions (never read) set to 0."""
    return torch.nan_to_num(out) * ~padding.t()[:, :, None]


def assert_close_where_real(ours, reference, padding):
    torch.testing.assert_close(at_real_positions(ours, padding), at_real_positions(reference, padding), atol=1e-5, rtol=0)


def pairs(length):
    i = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    return i, j


COVERING = [
    (SlidingWindowAttention, {"window_size": 80}),  # w / 2 = 40 >= every distance
    (LSHAttention, {"bucket_size": 40, "rounds": 4, "n_buckets": 8}),  # one chunk holds every key
    (SinkhornAttention, {"block_size": 40}),  # one block holds every key
]


@pytest.mark.parametrize("cls,kwargs", COVERING, ids=lambda c: getattr(c, "__name__", ""))
def test_a_window_bucket_or_block_covering_the_sequence_equals_full_attention(cls, kwargs):
    stock = stock_attention(DIM, HEADS, seed=1, self_attention=True)
    module = attention_like(stock, cls, **kwargs)
    x, padding = states(pad_from={1: 20, 2: 31})
    ours, _ = module(x, x, x, key_padding_mask=padding, need_weights=False)
    full, _ = stock(x, x, x, key_padding_mask=padding, need_weights=False)
    assert_close_where_real(ours, full, padding)


def test_window_attends_to_w_over_2_tokens_on_each_side():
    module = variant(SlidingWindowAttention, window_size=8)
    x, padding = states(length=37, pad_from={0: 30})
    i, j = pairs(37)
    ours, _ = module(x, x, x, key_padding_mask=padding)
    assert_close_where_real(ours, dense(module, x, padding, (i - j).abs() <= 4), padding)


def test_global_tokens_attend_to_and_are_attended_by_every_token():
    module = variant(SlidingWindowAttention, window_size=8, global_tokens=3)
    x, padding = states(length=37, pad_from={2: 25})
    i, j = pairs(37)
    allowed = ((i - j).abs() <= 4) | (j < 3) | (i < 3)
    ours, _ = module(x, x, x, key_padding_mask=padding)
    assert_close_where_real(ours, dense(module, x, padding, allowed), padding)


def test_stride_adds_every_s_th_token():
    module = variant(SlidingWindowAttention, window_size=6, stride=5)
    x, padding = states(length=37, pad_from={1: 33})
    i, j = pairs(37)
    allowed = ((i - j).abs() <= 3) | ((i - j) % 5 == 0)
    ours, _ = module(x, x, x, key_padding_mask=padding)
    assert_close_where_real(ours, dense(module, x, padding, allowed), padding)


def test_window_global_tokens_and_stride_share_one_softmax():
    module = variant(SlidingWindowAttention, window_size=4, global_tokens=2, stride=3)
    x, padding = states(length=29, pad_from={0: 20})
    i, j = pairs(29)
    allowed = ((i - j).abs() <= 2) | (j < 2) | (i < 2) | ((i - j) % 3 == 0)
    ours, _ = module(x, x, x, key_padding_mask=padding)
    assert_close_where_real(ours, dense(module, x, padding, allowed), padding)


def test_lsh_bucket_is_the_argmax_over_rotations_and_their_negations():
    rotations = torch.randn(HEADS, 8, 3, 5, generator=torch.Generator().manual_seed(2))  # 10 buckets, 3 rounds
    x = torch.randn(2, HEADS, 11, 8, generator=torch.Generator().manual_seed(3))
    buckets = lsh_buckets(x, rotations)  # (batch, heads, rounds, len)
    for r in range(3):
        rotated = torch.einsum("bhtd,hdk->bhtk", x, rotations[:, :, r])
        assert torch.equal(buckets[:, :, r], torch.cat([rotated, -rotated], -1).argmax(-1))
    assert torch.equal(lsh_buckets(3.7 * x, rotations), buckets)  # angular: the norm does not matter


def lsh_reference(module, x, padding, chunk):
    """Each round: rank queries and keys by (bucket, position); a query in chunk c sees the keys
    of chunks c and c - 1; rounds combined by their log-sum-exp."""
    q, k, v = (per_head(module, x, w) for w in "qkv")
    batch, heads, length, _ = q.shape
    rotations = module.rotations(x.device, x.dtype)
    n_buckets = 2 * rotations.size(3)

    def chunk_of(vectors):  # (batch, heads, rounds, len): the chunk of every position
        buckets = lsh_buckets(vectors, rotations).masked_fill(padding[:, None, None, :], n_buckets)
        ranks = torch.empty_like(buckets)
        for index in torch.cartesian_prod(*(torch.arange(n) for n in buckets.shape[:3])).tolist():
            row = buckets[tuple(index)].tolist()
            order = sorted(range(length), key=lambda p: (row[p], p))
            ranks[tuple(index)] = torch.tensor(order).argsort()
        return ranks // chunk

    q_chunk, k_chunk = chunk_of(q), chunk_of(k)
    outs, lses = [], []
    for r in range(rotations.size(2)):
        gap = q_chunk[:, :, r, :, None] - k_chunk[:, :, r, None, :]  # (batch, heads, len, len)
        allowed = ((gap == 0) | (gap == 1)) & ~padding[:, None, None, :]
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k).masked_fill(~allowed, float("-inf"))
        lses.append(torch.logsumexp(scores, -1))
        outs.append(torch.einsum("bhqk,bhkd->bhqd", torch.softmax(scores, -1), v))
    weights = torch.softmax(torch.stack(lses), dim=0)[..., None]
    return merge_heads(module, (torch.stack(outs) * weights).sum(0))


def test_lsh_attends_within_chunks_of_sorted_buckets_over_rounds():
    module = variant(LSHAttention, rounds=3, bucket_size=6, n_buckets=6)
    x, padding = states(batch=2, length=27, pad_from={1: 19})
    ours, _ = module(x, x, x, key_padding_mask=padding)
    assert_close_where_real(ours, lsh_reference(module, x, padding, 6), padding)


def test_lsh_is_deterministic_at_evaluation():
    module = variant(LSHAttention, bucket_size=8, n_buckets=8)
    x, padding = states()
    first, _ = module(x, x, x, key_padding_mask=padding)
    torch.manual_seed(123)  # the global generator plays no part at evaluation
    second, _ = module(x, x, x, key_padding_mask=padding)
    assert torch.equal(first, second)


def test_lsh_training_hashes_are_fixed_by_the_seed():
    module = variant(LSHAttention, bucket_size=8, n_buckets=8).train()
    x, padding = states()

    def run(seed):
        torch.manual_seed(seed)
        return module(x, x, x, key_padding_mask=padding)[0]

    assert torch.equal(run(7), run(7))
    assert not torch.equal(run(7), run(8))


def test_sinkhorn_sorting_matrix_is_doubly_stochastic_over_real_blocks():
    q = torch.randn(2, HEADS, 5, 4, 8, generator=torch.Generator().manual_seed(4))  # (batch, heads, blocks, block, dim)
    k = torch.randn(2, HEADS, 5, 4, 8, generator=torch.Generator().manual_seed(5))
    real = torch.ones(2, 1, 5, 4, dtype=torch.bool)
    real[1, :, 3, 2:] = False
    real[1, :, 4] = False  # example 1: its last block is all padding
    sort = sinkhorn_block_sort(q, k, real, iterations=40, temperature=0.75, noise=False)
    torch.testing.assert_close(sort[0].sum(-1), torch.ones(HEADS, 5), atol=1e-4, rtol=0)
    torch.testing.assert_close(sort[0].sum(-2), torch.ones(HEADS, 5), atol=1e-4, rtol=0)
    torch.testing.assert_close(sort[1, :, :4, :4].sum(-1), torch.ones(HEADS, 4), atol=1e-4, rtol=0)
    torch.testing.assert_close(sort[1, :, :4, :4].sum(-2), torch.ones(HEADS, 4), atol=1e-4, rtol=0)
    assert torch.equal(sort[1, :, 4], torch.zeros(HEADS, 5)) and torch.equal(sort[1, :, :, 4], torch.zeros(HEADS, 5))


def test_sinkhorn_block_attends_to_its_own_block_and_its_sorted_block():
    module = variant(SinkhornAttention, block_size=5)
    x, padding = states(batch=2, length=23, pad_from={1: 17})  # 5 blocks, the last one partial
    q, k, v = (per_head(module, x, w) for w in "qkv")
    permutation = torch.tensor([3, 0, 2, 4, 1])  # block 2 is sorted next to itself
    sort = torch.eye(5)[permutation].expand(2, HEADS, 5, 5)
    ours = sinkhorn_attention(q, k, v, padding, 5, 8, 0.75, noise=False, block_sort=sort)

    i, j = pairs(23)
    allowed = (j // 5 == i // 5) | (j // 5 == permutation[i // 5])
    reference = dense_attention(q, k, v, allowed, padding)
    assert_close_where_real(merge_heads(module, ours), merge_heads(module, reference), padding)


def test_sinkhorn_is_deterministic_at_evaluation_and_noisy_in_training():
    module = variant(SinkhornAttention, block_size=6)
    x, padding = states()
    assert torch.equal(module(x, x, x, key_padding_mask=padding)[0], module(x, x, x, key_padding_mask=padding)[0])
    module.train()
    assert not torch.equal(module(x, x, x, key_padding_mask=padding)[0], module(x, x, x, key_padding_mask=padding)[0])


BATCHABLE = [
    (SlidingWindowAttention, {"window_size": 6, "global_tokens": 2, "stride": 4}),
    (LSHAttention, {"bucket_size": 5, "n_buckets": 6}),
    (SinkhornAttention, {"block_size": 5}),
]


@pytest.mark.parametrize("cls,kwargs", BATCHABLE, ids=lambda c: getattr(c, "__name__", ""))
def test_batched_equals_one_at_a_time(cls, kwargs):
    module = variant(cls, seed=6, **kwargs)
    lengths = [31, 12, 24]
    x, padding = states(length=31, pad_from={1: 12, 2: 24})
    batched, _ = module(x, x, x, key_padding_mask=padding)
    for row, n in enumerate(lengths):
        alone, _ = module(x[:n, row : row + 1], x[:n, row : row + 1], x[:n, row : row + 1])
        torch.testing.assert_close(batched[:n, row : row + 1], alone, atol=1e-5, rtol=0)
