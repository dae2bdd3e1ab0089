"""Encoder self-attentions (Section 2): each pattern against a dense masked reference."""

import pytest
import torch

from builders.hepos import (
    attention_like,
    dense_attention,
    merge_heads,
    per_head,
    reference_block_sort,
    sinkhorn_dense_reference,
    stock_attention,
)
from pagesum_plugin.systems.hepos.efficient_attention import (
    LSHAttention,
    SinkhornAttention,
    SlidingWindowAttention,
    lsh_attention,
    lsh_buckets,
    sinkhorn,
    sinkhorn_attention,
    sinkhorn_block_sort,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one CPU thread

DIM, HEADS = 32, 4


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


def assert_heads_close_where_real(ours, reference, padding):
    """Per-head outputs (batch, heads, len, head_dim) compared at real query positions only."""
    real = ~padding[:, None, :, None]
    torch.testing.assert_close(torch.nan_to_num(ours) * real, torch.nan_to_num(reference) * real, atol=1e-5, rtol=0)


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


def sorted_chunks(buckets, padding, chunk):
    """(batch, heads, rounds, len): each position's chunk once the positions of a round are
    ranked by (bucket, position), padding after every bucket."""
    batch, heads, rounds, length = buckets.shape
    chunks = torch.empty_like(buckets)
    for b, h, r in torch.cartesian_prod(torch.arange(batch), torch.arange(heads), torch.arange(rounds)).tolist():
        row, pad = buckets[b, h, r].tolist(), padding[b].tolist()
        order = sorted(range(length), key=lambda p: (pad[p], row[p], p))
        chunks[b, h, r] = torch.tensor(order).argsort() // chunk
    return chunks


def rounds_showing(buckets, padding, chunk):
    """(batch, heads, len, len): in how many rounds query i sees key j, by Reformer's rule: one
    sort order for queries and keys, and a query in chunk c sees the keys of chunks c and c - 1."""
    chunks = sorted_chunks(buckets, padding, chunk)
    gap = chunks[..., :, None] - chunks[..., None, :]  # (batch, heads, rounds, len, len)
    return ((gap == 0) | (gap == 1)).sum(dim=2)


def lsh_dense_reference(q, k, v, padding, buckets, chunk):
    """softmax(q k^T) v over the keys some round shows the query, a key weighed by the number of
    rounds that show it: the rounds' outputs combined by their log-sum-exp (Kitaev et al. 2020)."""
    seen = rounds_showing(buckets, padding, chunk)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) + seen.float().log()  # log 0 = -inf: never seen
    scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
    return torch.einsum("bhqk,bhkd->bhqd", torch.softmax(scores, -1), v)


def shared_vectors(module, x):
    """(q_proj(x) + k_proj(x)) / 2 per head: the one vector the HEPOS authors hash per position."""
    shared = (module.q_proj(x) + module.k_proj(x)) / 2
    return shared.view(x.size(0), x.size(1), module.num_heads, module.head_dim).permute(1, 2, 0, 3)


def lsh_reference(module, x, padding, chunk):
    """BART's q, k, v attending over the chunks of one sort order per round, the order of the
    buckets of each position's shared query-key vector."""
    q, k, v = (per_head(module, x, w) for w in "qkv")
    buckets = lsh_buckets(shared_vectors(module, x), module.rotations(x.device, x.dtype))
    return merge_heads(module, lsh_dense_reference(q, k, v, padding, buckets, chunk))


def test_lsh_hashes_each_position_once_from_its_shared_query_key_vector():
    """Reformer hashes one vector per position (shared-QK), and so do the HEPOS authors:
    ``(q_proj(x) + k_proj(x)) / 2`` (LongDocSum, LSHSelfAttention), not queries and keys apart."""
    module = variant(LSHAttention, rounds=3, bucket_size=4, n_buckets=8)
    x, _ = states(batch=2, length=13)
    q, k = per_head(module, x, "q"), per_head(module, x, "k")
    expected = lsh_buckets(shared_vectors(module, x), module.rotations(x.device, x.dtype))
    assert torch.equal(module.buckets(q, k), expected)  # (batch, heads, rounds, len): one bucket per position


def test_lsh_query_meets_the_keys_of_its_bucket_in_its_chunk_or_the_chunk_before():
    """Kitaev et al. (2020), Section 2: with one hash shared by a position's query and key, sorting
    by bucket puts "the i-th query and the i-th key" at the same position, so a bucket no larger
    than a chunk lies in one chunk or two adjacent ones, and each query, attending to the keys of
    its chunk and of the chunk before, sees every key of its bucket sorted at or before it.

    The buckets are known by construction: a position's hashed vector is +e_d or -e_d, which the
    identity rotation sends to bucket d or d + dims. Queries and keys are unrelated random
    vectors: hashed apart, a bucket's queries and keys would land in unrelated chunks."""
    head_dim, length, chunk = 8, 24, 4
    generator = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(2, HEADS, length, head_dim, generator=generator) for _ in range(3))
    padding = torch.zeros(2, length, dtype=torch.bool)
    padding[1, 21:] = True
    sizes = {3: 4, 12: 3, 0: 2, 9: 4, 5: 1, 14: 6, 7: 4}  # bucket: members; bucket 14 is larger than a chunk
    members = torch.tensor([bucket for bucket, n in sizes.items() for _ in range(n)])
    labels = torch.stack([members[torch.randperm(length, generator=generator)] for _ in range(2 * HEADS)])
    labels = labels.view(2, HEADS, 1, length)  # (batch, heads, rounds=1, len), scattered over the positions
    direction = torch.nn.functional.one_hot(labels[:, :, 0] % head_dim, head_dim).float()
    hashed = torch.where(labels[:, :, 0, :, None] < head_dim, direction, -direction)  # (batch, heads, len, dim)
    identity = torch.eye(head_dim).expand(HEADS, head_dim, head_dim)[:, :, None]  # (heads, dim, rounds=1, dim)
    buckets = lsh_buckets(hashed, identity)
    assert torch.equal(buckets, labels)  # every position is hashed into its known bucket

    ours = lsh_attention(q, k, v, padding, buckets, chunk)
    reference = lsh_dense_reference(q, k, v, padding, buckets, chunk)
    assert_heads_close_where_real(ours, reference, padding)

    # what that reference promises for a bucket that fits in a chunk
    i, j = pairs(length)
    real = ~padding[:, None, :, None] & ~padding[:, None, None, :]
    same_bucket = (buckets[:, :, 0, :, None] == buckets[:, :, 0, None, :]) & real  # (batch, heads, len, len)
    fits = same_bucket & (same_bucket.sum(-1, keepdim=True) <= chunk)
    assert fits.any() and (same_bucket & ~fits).any()  # buckets of both kinds
    chunks = sorted_chunks(buckets, padding, chunk)[:, :, 0]  # (batch, heads, len)
    gap = chunks[..., :, None] - chunks[..., None, :]
    seen = rounds_showing(buckets, padding, chunk) > 0
    assert (gap[fits].abs() <= 1).all()  # the same chunk or adjacent ones
    assert seen[fits & (j <= i)].all()  # every key of the bucket sorted at or before the query
    assert seen[fits & (gap == 0)].all()  # and, in one chunk, the bucket's queries and keys all meet


def test_lsh_rounds_each_sort_queries_and_keys_by_the_same_buckets():
    """Each round hashes the positions anew; within a round queries, keys and values follow one
    sort order, padding after every bucket; the rounds share one softmax (their log-sum-exps)."""
    generator = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(3, HEADS, 29, 8, generator=generator) for _ in range(3))
    padding = torch.zeros(3, 29, dtype=torch.bool)
    padding[1, 17:] = True
    padding[2, 26:] = True
    buckets = torch.randint(6, (3, HEADS, 3, 29), generator=generator)  # 3 rounds of 6 buckets
    ours = lsh_attention(q, k, v, padding, buckets, 5)
    reference = lsh_dense_reference(q, k, v, padding, buckets, 5)
    assert_heads_close_where_real(ours, reference, padding)


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


def test_sinkhorn_normalisation_is_doubly_stochastic_over_real_blocks():
    log_scores = torch.randn(2, HEADS, 5, 5, generator=torch.Generator().manual_seed(4))
    has_real = torch.ones(2, 1, 5, dtype=torch.bool)
    has_real[1, :, 4] = False  # example 1: its last block is all padding
    sort = sinkhorn(log_scores, has_real[..., :, None] & has_real[..., None, :], iterations=40)
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


def test_sinkhorn_sort_is_the_authors_network_on_log_relu_block_scores():
    """LongDocSum's sorting network: R = mean(q_i) . mean(k_j) for every pair of blocks, then
    Sinkhorn of log(relu(R) + eps) / T; blocks without a real token take no part. The scores
    have both signs, so relu decides part of the sort."""
    generator = torch.Generator().manual_seed(21)
    q, k = (2 * torch.randn(2, HEADS, 20, 8, generator=generator) for _ in range(2))
    padding = torch.zeros(2, 20, dtype=torch.bool)
    padding[1, 13:] = True  # row 1: block 3 partly padding, block 4 all padding
    blocked = (2, HEADS, 5, 4, 8)
    ours = sinkhorn_block_sort(q.view(blocked), k.view(blocked), (~padding).view(2, 1, 5, 4), iterations=7,
                               temperature=0.7, noise=False)
    reference = reference_block_sort(q, k, padding, 4, iterations=7, temperature=0.7)
    torch.testing.assert_close(ours.double(), reference, atol=1e-5, rtol=0)
    means = q.view(blocked).mean(3) @ k.view(blocked).mean(3).transpose(-1, -2)
    assert (means < 0).any() and (means > 0).any()


def test_sinkhorn_attention_mixes_the_sorted_block_by_the_learned_sort():
    """The module end to end (evaluation: no noise) against attention spelled out from the
    reference sort: each query block sees its own keys and the slot-wise mixture
    sum_j P_ij K_j of the other blocks' keys, values alike."""
    module = variant(SinkhornAttention, block_size=5)
    x, padding = states(batch=2, length=25, pad_from={1: 17})  # row 1: block 3 partly, block 4 all padding
    q, k, v = (per_head(module, x, w) for w in "qkv")
    sort = reference_block_sort(q, k, padding, 5, module.iterations, module.temperature)
    assert ((sort > 0.05) & (sort < 0.95)).any(), "a soft sort: the mixture, not a permutation, is under test"
    reference = sinkhorn_dense_reference(q, k, v, padding, 5, sort).float()
    ours, _ = module(x, x, x, key_padding_mask=padding)
    assert_close_where_real(ours, merge_heads(module, reference), padding)


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


@pytest.mark.parametrize("cls,kwargs", BATCHABLE, ids=lambda c: getattr(c, "__name__", ""))
def test_what_stands_at_padding_positions_changes_nothing_at_real_ones(cls, kwargs):
    """Padding keys are masked in every variant, and Sinkhorn's block means read real tokens
    only (the authors' release averages padding in, and masks query and key together): huge
    values at the padding positions leave the real positions' outputs as they are."""
    module = variant(cls, seed=7, **kwargs)
    x, padding = states(length=31, pad_from={1: 12, 2: 24})
    loud = x.masked_fill(padding.t()[:, :, None], 1e4)  # (length, batch, dim): padding positions at 1e4
    quiet, _ = module(x, x, x, key_padding_mask=padding)
    shouted, _ = module(loud, loud, loud, key_padding_mask=padding)
    assert_close_where_real(shouted, quiet, padding)
