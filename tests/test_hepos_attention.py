"""Encoder-decoder attentions (Section 3): HEPOS (Eq. 1) and Linformer, against dense references."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.reference.modules import before
from builders.hepos import attention_like, dense_attention, merge_heads, per_head, stock_attention
from pagesum_plugin.systems.hepos.attention import CrossAttention, HeposAttention, LinformerCrossAttention

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one CPU thread

DIM = 24


def inputs(batch=3, src_len=23, tgt_len=5, seed=0, pad_from=None):
    """query (tgt_len, batch, dim), memory (src_len, batch, dim), padding (batch, src_len)."""
    rng = torch.Generator().manual_seed(seed)
    query = torch.randn(tgt_len, batch, DIM, generator=rng)
    memory = torch.randn(src_len, batch, DIM, generator=rng)
    padding = torch.zeros(batch, src_len, dtype=torch.bool)
    for row, start in (pad_from or {}).items():
        padding[row, start:] = True
    return query, memory, padding


def hepos(heads, stride, seed=0):
    return attention_like(stock_attention(DIM, heads, seed, encoder_decoder_attention=True), HeposAttention, stride=stride)


def eq1_allowed(heads, stride, src_len):
    """Eq. 1: a^h_ji is nonzero only if (i - h) mod s_h == 0; (1, heads, 1, src_len)."""
    h = torch.arange(heads)[:, None]
    i = torch.arange(src_len)[None, :]
    return ((i - h) % stride == 0)[None, :, None, :]


CASES = [  # heads, stride, src_len, padding per row
    (4, 4, 24, {}),
    (4, 4, 23, {}),  # not a multiple of the stride
    (4, 3, 22, {1: 13, 2: 7}),  # padding, and a stride that does not divide the heads
    (6, 4, 19, {0: 11}),
    (4, 2, 9, {2: 4}),
]


@pytest.mark.parametrize("heads,stride,src_len,pad_from", CASES)
def test_gather_equals_dense_masked_reference(heads, stride, src_len, pad_from):
    module = hepos(heads, stride)
    query, memory, padding = inputs(src_len=src_len, pad_from=pad_from)
    ours, _ = module(query, memory, memory, key_padding_mask=padding, static_kv=True)

    q, k, v = per_head(module, query, "q"), per_head(module, memory, "k"), per_head(module, memory, "v")
    reference = merge_heads(module, dense_attention(q, k, v, eq1_allowed(heads, stride, src_len), padding))
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)


def test_head_h_attends_exactly_to_positions_congruent_to_h():
    heads, stride, src_len = 6, 4, 21
    query, memory, padding = inputs(src_len=src_len, pad_from={1: 15})
    _, weights = hepos(heads, stride)(query, memory, memory, key_padding_mask=padding, static_kv=True,
                                      need_head_weights=True)  # (heads, batch, tgt_len, src_len)
    expected = eq1_allowed(heads, stride, src_len)[0, :, None] & ~padding[None, :, None, :]
    assert torch.equal(weights > 0, expected.expand_as(weights))
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))


def test_heads_together_cover_every_position():
    heads, stride, src_len = 4, 4, 30
    query, memory, padding = inputs(src_len=src_len)
    _, weights = hepos(heads, stride)(query, memory, memory, key_padding_mask=padding, static_kv=True,
                                      need_head_weights=True)
    assert bool((weights > 0).any(dim=0).all())  # every (example, step, position) is seen by some head


def test_each_head_keeps_only_its_n_over_s_keys_and_values():
    heads, stride, src_len = 4, 4, 23
    module = hepos(heads, stride)
    query, memory, padding = inputs(src_len=src_len)
    state = {}
    module(query[:1], memory, memory, key_padding_mask=padding, incremental_state=state, static_kv=True)
    cached = module._get_input_buffer(state)
    assert cached["prev_key"].shape == (3, heads, 6, DIM // heads)  # ceil(23 / 4) = 6 positions per head
    assert cached["prev_value"].shape == (3, heads, 6, DIM // heads)
    assert cached["prev_key_padding_mask"].shape == (3, heads, 6)


def test_stride_one_equals_fairseq_multihead_attention():
    stock = stock_attention(DIM, 4, seed=3, encoder_decoder_attention=True)
    module = attention_like(stock, HeposAttention, stride=1)
    query, memory, padding = inputs(pad_from={0: 17, 2: 9})
    ours, our_weights = module(query, memory, memory, key_padding_mask=padding, static_kv=True, need_head_weights=True)
    theirs, their_weights = stock(query, memory, memory, key_padding_mask=padding, static_kv=True, need_head_weights=True)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    torch.testing.assert_close(our_weights, their_weights, atol=1e-6, rtol=0)


def test_full_cross_attention_equals_fairseq_multihead_attention():
    stock = stock_attention(DIM, 4, seed=4, encoder_decoder_attention=True)
    module = attention_like(stock, CrossAttention)
    query, memory, padding = inputs(pad_from={1: 5})
    ours, _ = module(query, memory, memory, key_padding_mask=padding, static_kv=True)
    theirs, _ = stock(query, memory, memory, key_padding_mask=padding, static_kv=True)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_a_head_whose_positions_are_all_padding_contributes_zeros_not_nan():
    module = hepos(heads=4, stride=4)
    query, memory, padding = inputs(src_len=6, pad_from={1: 2})  # row 1: only positions 0 and 1 are real
    out, weights = module(query, memory, memory, key_padding_mask=padding, static_kv=True, need_head_weights=True)
    assert torch.isfinite(out).all()
    assert torch.equal(weights[2:, 1], torch.zeros_like(weights[2:, 1]))  # heads 2 and 3 see no real token


def test_cached_memory_gives_the_same_output_as_a_fresh_pass():
    module = hepos(heads=4, stride=2)
    query, memory, padding = inputs(pad_from={2: 12})
    state = {}
    for t in range(query.size(0)):
        step, _ = module(query[t : t + 1], memory, memory, key_padding_mask=padding, incremental_state=state, static_kv=True)
        fresh, _ = module(query[t : t + 1], memory, memory, key_padding_mask=padding, static_kv=True)
        torch.testing.assert_close(step, fresh, atol=1e-6, rtol=0)


@pytest.mark.parametrize("cls,kwargs", [(HeposAttention, {"stride": 4}), (CrossAttention, {}),
                                         (LinformerCrossAttention, {"max_source_positions": 32, "compressed": 8})])
def test_beams_sharing_one_memory_equal_beams_with_their_own_copies_through_reordering(cls, kwargs):
    torch.manual_seed(5)
    module = attention_like(stock_attention(DIM, 4, 5, encoder_decoder_attention=True), cls, **kwargs)
    beam, sentences = 3, 2
    query, memory, padding = inputs(batch=sentences * beam, src_len=20)
    memory = memory[:, ::beam].repeat_interleave(beam, dim=1)  # one source per sentence, repeated per beam
    padding = padding[::beam].repeat_interleave(beam, dim=0)
    shared, own = {}, {}
    module.set_beam_size(beam)
    orders = [torch.tensor([2, 0, 0, 4, 5, 3]), torch.tensor([3, 5, 4])]  # within sentences; then sentence 0 finishes
    for t, order in enumerate([None, *orders]):
        if order is not None:
            module.reorder_incremental_state(shared, order)
            module.reorder_incremental_state(own, order)
            query = query.index_select(1, order)
            memory, padding = memory.index_select(1, order), padding.index_select(0, order)
        one_copy = memory[:, ::beam], padding[::beam]
        a, _ = module(query[t : t + 1], one_copy[0], one_copy[0], key_padding_mask=one_copy[1], incremental_state=shared,
                      static_kv=True)
        b, _ = module(query[t : t + 1], memory, memory, key_padding_mask=padding, incremental_state=own, static_kv=True)
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    assert module._get_input_buffer(shared)["prev_key"].size(0) == 1  # one memory for the one sentence left


def test_linformer_attends_over_keys_and_values_projected_along_the_sequence():
    module = attention_like(stock_attention(DIM, 4, 6, encoder_decoder_attention=True), LinformerCrossAttention,
                            max_source_positions=32, compressed=8)
    query, memory, padding = inputs(src_len=20, pad_from={1: 12})
    ours, _ = module(query, memory, memory, key_padding_mask=padding, static_kv=True)

    keep = (~padding)[:, None, :, None].float()
    q = per_head(module, query, "q")
    k = torch.einsum("cs,bhsd->bhcd", module.compress_k.weight[:, :20], per_head(module, memory, "k") * keep)  # E K
    v = torch.einsum("cs,bhsd->bhcd", module.compress_v.weight[:, :20], per_head(module, memory, "v") * keep)  # F V
    reference = merge_heads(module, dense_attention(q, k, v, torch.ones(1, 1, 1, 8, dtype=torch.bool)))
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)


def test_linformer_output_does_not_depend_on_batch_padding():
    module = attention_like(stock_attention(DIM, 4, 7, encoder_decoder_attention=True), LinformerCrossAttention,
                            max_source_positions=32, compressed=8)
    query, memory, padding = inputs(batch=2, src_len=20, pad_from={1: 12})
    batched, _ = module(query, memory, memory, key_padding_mask=padding, static_kv=True)
    alone, _ = module(query[:, 1:], memory[:12, 1:], memory[:12, 1:], key_padding_mask=padding[1:, :12], static_kv=True)
    torch.testing.assert_close(batched[:, 1:], alone, atol=1e-5, rtol=0)


class LargestTensor(TorchDispatchMode):
    """Records the most elements of any tensor an operation produces inside the block."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in (out if isinstance(out, (tuple, list)) else [out]):
            if isinstance(tensor, torch.Tensor):
                self.numel = max(self.numel, tensor.numel())
        return out


def largest_training_tensors(reference: bool) -> dict:
    """The number of elements of the largest tensor a training pass of HEPOS and of full
    cross-attention creates (heads 4, stride 4, 2,048 source and 64 target positions)."""
    heads, stride, src_len, tgt_len = 4, 4, 2048, 64
    query, memory, padding = inputs(batch=1, src_len=src_len, tgt_len=tgt_len)
    largest = {}
    for name, module in (("hepos", hepos(heads, stride)), ("full", attention_like(
            stock_attention(DIM, heads, 0, encoder_decoder_attention=True), CrossAttention))):
        module = (before(module) if reference else module).train()
        with LargestTensor() as record:
            module(query, memory, memory, key_padding_mask=padding, static_kv=True, need_weights=False)
        largest[name] = record.numel
    return largest


def test_hepos_scores_hold_n_over_s_keys_per_head_not_n():
    """Section 3: a head scores only its n / s_h source positions, so the largest tensor of a
    training pass with the scores materialised is (batch, heads, m, n / s_h), a quarter of full
    cross-attention's (batch, heads, m, n) at s_h = 4, with no dense mask or per-head copy."""
    largest = largest_training_tensors(reference=True)
    assert largest["hepos"] == 4 * 64 * 2048 // 4
    assert largest["full"] == 4 * 64 * 2048


def test_through_sdpa_neither_attention_materialises_a_score_matrix():
    largest = largest_training_tensors(reference=False)
    assert largest["hepos"] < 4 * 64 * 2048 // 4
    assert largest["full"] < 4 * 64 * 2048 // 4
