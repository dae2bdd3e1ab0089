"""Decoder self-attention whose incremental cache costs one copy per step, not two.

fairseq's attention grows its cached keys and values by concatenation, a fresh copy of
the whole cache at every decoding step, and beam search reorders the cache before that
with a second fresh copy. PageSum keeps this cache for every page of every beam, so over
a long summary (hundreds of tokens) the two copies and their allocations take as long as
the step's own computation (``benchmarks/beam_cache.py``). Here reordering only records
the order; the next step writes the reordered cache and the new position into one new
buffer. The cache keeps fairseq's layout, (rows, heads, length, head_dim), and the
attention is computed with the same operations on the same values, so the results are
those of fairseq's attention exactly.
"""

from typing import Dict, Optional, Tuple

import torch
from fairseq import utils
from fairseq.modules import MultiheadAttention
from torch import Tensor

PENDING_ORDER = "pending_order"  # rows still to be reordered: (rows,) indices into the cached rows


class DecoderSelfAttention(MultiheadAttention):
    """fairseq's decoder self-attention with reordering deferred to the next step's write.

    Steps that fairseq's attention would handle differently (padding in the summary
    prefix, an attention mask, bias or zero-attention keys) take fairseq's own path once
    the pending order is applied."""

    def reorder_incremental_state(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], new_order: Tensor):
        buffer = self._get_input_buffer(incremental_state)
        if "prev_key" not in buffer:
            return incremental_state
        pending = buffer.get(PENDING_ORDER)
        # the rows are now cached[pending][new_order] = cached[pending[new_order]]
        buffer[PENDING_ORDER] = new_order if pending is None else pending.index_select(0, new_order)
        return self._set_input_buffer(incremental_state, buffer)

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None, need_weights: bool = True,
                static_kv: bool = False, attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        if incremental_state is None:
            return super().forward(query, key, value, key_padding_mask, incremental_state, need_weights,
                                   static_kv, attn_mask, before_softmax, need_head_weights)
        buffer = self._get_input_buffer(incremental_state)
        plain = (self.self_attention and key_padding_mask is None and attn_mask is None and not before_softmax
                 and self.bias_k is None and not self.add_zero_attn and not self.onnx_trace
                 and buffer.get("prev_key_padding_mask") is None)
        if not plain:
            self._apply_pending_order(incremental_state, buffer)
            return super().forward(query, key, value, key_padding_mask, incremental_state, need_weights,
                                   static_kv, attn_mask, before_softmax, need_head_weights)

        tgt_len, bsz, embed_dim = query.shape
        heads, head_dim = self.num_heads, self.head_dim
        q = self.q_proj(query)
        q *= self.scaling
        q = q.contiguous().view(tgt_len, bsz * heads, head_dim).transpose(0, 1)  # (bsz*heads, tgt_len, head_dim)
        # the new positions' keys and values: (bsz, heads, tgt_len, head_dim)
        k = self.k_proj(query).contiguous().view(tgt_len, bsz * heads, head_dim).transpose(0, 1)
        v = self.v_proj(query).contiguous().view(tgt_len, bsz * heads, head_dim).transpose(0, 1)
        k, v = k.view(bsz, heads, tgt_len, head_dim), v.view(bsz, heads, tgt_len, head_dim)
        if "prev_key" in buffer:
            order = buffer.pop(PENDING_ORDER, None)
            k = extend(buffer["prev_key"], order, k)
            v = extend(buffer["prev_value"], order, v)
        buffer["prev_key"], buffer["prev_value"], buffer["prev_key_padding_mask"] = k, v, None
        self._set_input_buffer(incremental_state, buffer)

        src_len = k.size(2)
        k = k.view(bsz * heads, src_len, head_dim)
        v = v.view(bsz * heads, src_len, head_dim)
        attn_weights = torch.bmm(q, k.transpose(1, 2))  # (bsz*heads, tgt_len, src_len)
        attn_weights = self.apply_sparse_mask(attn_weights, tgt_len, src_len, bsz)
        attn_weights_float = utils.softmax(attn_weights, dim=-1, onnx_trace=self.onnx_trace)
        attn_probs = self.dropout_module(attn_weights_float.type_as(attn_weights))
        attn = torch.bmm(attn_probs, v)  # (bsz*heads, tgt_len, head_dim)
        attn = self.out_proj(attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim))
        weights: Optional[Tensor] = None
        if need_weights or need_head_weights:
            weights = attn_weights_float.view(bsz, heads, tgt_len, src_len).transpose(1, 0)
            if not need_head_weights:
                weights = weights.mean(dim=0)  # averaged over heads
        return attn, weights

    def _apply_pending_order(self, incremental_state, buffer: Dict[str, Optional[Tensor]]) -> None:
        order = buffer.pop(PENDING_ORDER, None)
        if order is None:
            return
        for name, cached in buffer.items():
            if cached is not None:
                buffer[name] = cached.index_select(0, order)
        self._set_input_buffer(incremental_state, buffer)


def extend(cached: Tensor, order: Optional[Tensor], new: Tensor) -> Tensor:
    """cached (rows, heads, length, head_dim), reordered by ``order`` (new rows,) when given,
    then ``new`` (new rows, heads, tgt_len, head_dim) appended along the length: written
    once into a fresh buffer."""
    length = cached.size(2)
    out = cached.new_empty(new.size(0), cached.size(1), length + new.size(2), cached.size(3))
    if order is None:
        out[:, :, :length].copy_(cached)
    elif torch.is_grad_enabled() and cached.requires_grad:  # out= records no gradient
        out[:, :, :length].copy_(cached.index_select(0, order))
    else:
        torch.index_select(cached, 0, order, out=out[:, :, :length])
    out[:, :, length:].copy_(new)
    return out
