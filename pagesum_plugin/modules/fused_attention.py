"""Encoder-decoder attention through torch's fused kernel (``scaled_dot_product_attention``).

fairseq's ``MultiheadAttention`` computes encoder-decoder attention as bmm + softmax: it keeps
the whole (rows x heads x tgt_len x src_len) score matrix in fp32, and a second copy in the
model's precision, in training and at every decoding step, and it averages the weights over
the heads whenever a caller might want them. This subclass keeps its projections (BART's
weights load unchanged), its incremental cache layout (so beam reordering, batch pruning and
BART's ``set_beam_size`` work as before) and its beams-share-the-source layout (fewer key rows
than query rows), and computes the attention with SDPA, which never materialises the scores
on the flash and memory-efficient kernels. Attention weights are computed only when a caller
asks for them (``need_weights`` / ``need_head_weights``), and then by fairseq's own path.
"""

from typing import Dict, Optional, Tuple

import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from .decoding_step import linear_step, transposed_weight

STEP_WEIGHTS = "step_weights"  # incremental state: the projections' weights as a search's steps use them


def attention_dropout(module: MultiheadAttention) -> float:
    """The dropout probability SDPA should apply: fairseq's, in training (or when asked to at inference)."""
    dropout = module.dropout_module
    return dropout.p if (module.training or dropout.apply_during_inference) else 0.0


class FusedCrossAttention(MultiheadAttention):
    """fairseq's encoder-decoder attention with SDPA in place of bmm + softmax."""

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None, need_weights: bool = True,
                static_kv: bool = False, attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        fused = (self.encoder_decoder_attention and not self.self_attention
                 and not (need_weights or need_head_weights) and attn_mask is None and not before_softmax
                 and self.bias_k is None and not self.add_zero_attn and not self.onnx_trace
                 and (incremental_state is None or static_kv))
        if not fused:
            return super().forward(query, key, value, key_padding_mask, incremental_state, need_weights,
                                   static_kv, attn_mask, before_softmax, need_head_weights)
        tgt_len, bsz, embed_dim = query.shape
        heads, head_dim = self.num_heads, self.head_dim
        saved = self._get_input_buffer(incremental_state) if incremental_state is not None else {}
        if "prev_key" in saved:  # computed at the first step of this source
            k, v, bias = saved["prev_key"], saved["prev_value"], saved.get("padding_bias")
        else:
            k, v, padding = self._keys_and_values(key, key_padding_mask, bsz)
            bias = None if padding is None or padding.dim() == 0 else \
                k.new_zeros(padding.shape).masked_fill(padding.bool(), float("-inf"))[:, None, None, :]
            if incremental_state is not None:  # the mask too, made once: a step then runs no operator for it
                saved.update(prev_key=k, prev_value=v, prev_key_padding_mask=padding, padding_bias=bias)
                self._set_input_buffer(incremental_state, saved)
        # k, v: (kv_bsz, heads, src_len, head_dim); padding: (kv_bsz, src_len) True at padding, or None
        kv_bsz = k.size(0)
        beams = bsz // kv_bsz  # query rows per key row: 1, or the beams that share a source
        query_weight, out_weight = self._step_weights(incremental_state)
        # the rows projected as one matrix, scaled: (tgt_len * bsz, dim)
        q = linear_step(self.q_proj, query.reshape(tgt_len * bsz, embed_dim), query_weight, self.scaling)
        if tgt_len == 1:  # a decoding step: (kv_bsz, beams, heads, head_dim) -> (kv_bsz, heads, beams, head_dim)
            q = q.view(kv_bsz, beams, heads, head_dim).transpose(1, 2)
        else:  # (tgt_len, kv_bsz, beams, heads, head_dim) -> (kv_bsz, heads, beams * tgt_len, head_dim)
            q = q.view(tgt_len, kv_bsz, beams, heads, head_dim).permute(1, 3, 2, 0, 4).reshape(
                kv_bsz, heads, beams * tgt_len, head_dim)
        # bias: (kv_bsz, 1, 1, src_len) -inf at padding keys, 0 elsewhere, or None (what SDPA would
        # make of a bool mask at every call)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=attention_dropout(self), scale=1.0)
        if tgt_len == 1:  # (kv_bsz, heads, beams, head_dim) -> (bsz, dim)
            out = out.transpose(1, 2).reshape(bsz, embed_dim)
        else:  # (kv_bsz, heads, beams, tgt_len, head_dim) -> (tgt_len * bsz, dim)
            out = out.view(kv_bsz, heads, beams, tgt_len, head_dim).permute(3, 0, 2, 1, 4).reshape(
                tgt_len * bsz, embed_dim)
        return linear_step(self.out_proj, out, out_weight).view(tgt_len, bsz, embed_dim), None

    def _step_weights(self, incremental_state) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """The query and output projections' weights transposed, kept for a search's steps (a
        step then transposes none); None outside a search. Kept apart from the cached keys and
        values, which beam search reorders."""
        if incremental_state is None:
            return None, None
        weights = self.get_incremental_state(incremental_state, STEP_WEIGHTS)
        if weights is None:
            weights = {"query": transposed_weight(self.q_proj), "out": transposed_weight(self.out_proj)}
            self.set_incremental_state(incremental_state, STEP_WEIGHTS, weights)
        return weights["query"], weights["out"]

    def _keys_and_values(self, key: Optional[Tensor], key_padding_mask: Optional[Tensor],
                         bsz: int) -> Tuple[Tensor, Tensor, Optional[Tensor]]:
        """Project the encoder output (src_len, kv_bsz, dim) into (kv_bsz, heads, src_len, head_dim),
        reduced to one row per source when BART's ``set_beam_size`` repeated it per beam."""
        if key is None:
            raise ValueError("encoder-decoder attention needs the encoder output at its first step")
        if self.beam_size > 1 and bsz == key.size(1):  # (src_len, bsz * beam, dim) -> (src_len, bsz, dim)
            key = key.view(key.size(0), -1, self.beam_size, key.size(2))[:, :, 0, :]
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.view(-1, self.beam_size, key_padding_mask.size(1))[:, 0, :]
        src_len, kv_bsz, _ = key.shape
        k = self.k_proj(key).view(src_len, kv_bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        v = self.v_proj(key).view(src_len, kv_bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        return k, v, key_padding_mask
