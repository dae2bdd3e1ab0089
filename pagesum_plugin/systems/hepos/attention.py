"""Encoder-decoder attentions of Huang et al. (NAACL 2021, Section 3) on BART's weights.

* ``CrossAttention``: full attention, as BART's (every head sees every source token).
* ``HeposAttention``: head-wise positional strides (Eq. 1). With stride ``s``, head ``h``
  attends only to source positions ``i`` with ``i = h (mod s)``, so each query attends to
  ``n / s`` tokens per head, and the heads together cover every position. Each head's keys
  and values are *gathered* once per source: (batch, heads, n / s, head_dim), so the score
  matrix is (batch, heads, m, n / s), memory O(m n / s); there is no dense mask.
* ``LinformerCrossAttention``: Linformer adapted to encoder-decoder attention (Section 3's
  comparison): keys and values are projected along the sequence, ``K' = E K``, ``V' = F V``,
  from ``n`` to ``k`` rows (E, F: learned, (k, max_source_positions)). O(m k).

All three compute what each head attends to once per source (``memory``) and keep it in the
incremental state during decoding. They follow fairseq's beamable encoder-decoder attention
(BART's ``set_beam_size``, which stops the encoder output from being repeated per beam):
when the beams of a sentence share one copy of its encoder output, they share one copy of
the memory too, and reordering the beams only ever drops the sentences that finished. The
number of decoder rows per memory row is read from the shapes and kept with the memory, so
either layout decodes correctly whatever beam size the module was last told.
"""

from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from ...errors import SettingError
from ...modules.decoding_step import select_rows
from .efficient_attention import MASKED_SCORE, masked_softmax
from ...modules.fused_attention import attention_dropout

Memory = Tuple[Tensor, Tensor, Optional[Tensor]]


class CrossAttention(MultiheadAttention):
    """Full encoder-decoder attention with BART's projections, computed from a per-head memory,
    through SDPA unless attention weights are asked for."""

    def __init__(self, embed_dim: int, num_heads: int, kdim: Optional[int] = None, vdim: Optional[int] = None,
                 dropout: float = 0.0, q_noise: float = 0.0, qn_block_size: int = 8):
        super().__init__(embed_dim, num_heads, kdim=kdim, vdim=vdim, dropout=dropout, encoder_decoder_attention=True,
                         q_noise=q_noise, qn_block_size=qn_block_size)

    def memory(self, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor]) -> Memory:
        """What each head attends to.

        k, v: (batch, heads, src_len, head_dim); key_padding_mask: (batch, src_len), True at padding
        returns keys and values (batch, heads, mem_len, head_dim) and their mask (batch, heads, mem_len) or None.
        """
        mask = None if key_padding_mask is None else key_padding_mask.bool()[:, None, :].expand(-1, self.num_heads, -1)
        return k, v, mask

    def source_weights(self, probs: Tensor, src_len: int) -> Optional[Tensor]:
        """(batch, heads, tgt_len, mem_len) attention over the memory -> over source positions."""
        return probs

    def encode_memory(self, key: Tensor, key_padding_mask: Optional[Tensor]) -> Memory:
        """Project the encoder output (src_len, kv_bsz, kdim) and build the memory."""
        src_len, kv_bsz, _ = key.shape
        k = self.k_proj(key).view(src_len, kv_bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        v = self.v_proj(key).view(src_len, kv_bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        return self.memory(k, v, key_padding_mask)  # from k, v: (kv_bsz, heads, src_len, head_dim)

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None, need_weights: bool = True,
                static_kv: bool = False, attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        """query: (tgt_len, bsz, embed_dim); key: the encoder output (src_len, kv_bsz, kdim).

        Attention weights, when asked for outside training, are returned over source positions:
        (heads, bsz, tgt_len, src_len) with ``need_head_weights``, else their mean over heads.
        In training they are not computed (fairseq asks for them but nothing reads them)."""
        if attn_mask is not None:
            raise ValueError("encoder-decoder attention takes no attention mask")
        tgt_len, bsz, _ = query.shape
        saved = self._get_input_buffer(incremental_state)
        if "prev_key" in saved:  # computed at the first step of this source
            k, v, mask = saved["prev_key"], saved["prev_value"], saved.get("prev_key_padding_mask")
        else:
            if key is None:
                raise ValueError("encoder-decoder attention needs the encoder output at its first step")
            k, v, mask = self.encode_memory(key, key_padding_mask)
            if incremental_state is not None:
                # rows of the decoder that share each memory row: the beams of a sentence when
                # the encoder output was not repeated per beam (fairseq's set_beam_size); a Python
                # int, so that reordering never reads it back from the device
                beams = bsz // k.size(0)
                self._set_input_buffer(
                    incremental_state,
                    {"prev_key": k, "prev_value": v, "prev_key_padding_mask": mask, "beams_per_row": beams},
                )
        # k, v: (kv_bsz, heads, mem_len, head_dim); mask: (kv_bsz, heads, mem_len) or None
        kv_bsz = k.size(0)
        beams = bsz // kv_bsz  # decoder rows per memory row: 1, or the beam size when beams share the source

        q = self.q_proj(query) * self.scaling
        q = q.view(tgt_len, kv_bsz, beams, self.num_heads, self.head_dim).permute(1, 2, 3, 0, 4)
        # q: (kv_bsz, beams, heads, tgt_len, head_dim)
        wants_weights = (need_weights or need_head_weights) and not self.training and key is not None
        if wants_weights:
            attn, probs = self._attend_with_weights(q, k, v, mask)
        else:
            attn, probs = self._attend_fused(q, k, v, mask), None
        attn = attn.reshape(bsz, self.num_heads, tgt_len, self.head_dim).permute(2, 0, 1, 3)
        attn = self.out_proj(attn.reshape(tgt_len, bsz, self.embed_dim))

        weights: Optional[Tensor] = None
        if wants_weights:
            weights = self.source_weights(probs.reshape(bsz, self.num_heads, tgt_len, -1), key.size(0))
            if weights is not None:
                weights = weights.transpose(0, 1)  # (heads, bsz, tgt_len, src_len)
                if not need_head_weights:
                    weights = weights.mean(dim=0)
        return attn, weights

    def _attend_with_weights(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        """The score matrix, materialised: q (kv_bsz, beams, heads, tgt_len, head_dim), k, v
        (kv_bsz, heads, mem_len, head_dim), mask (kv_bsz, heads, mem_len) or None. Returns the
        output (kv_bsz, beams, heads, tgt_len, head_dim) and the weights, fp32."""
        scores = torch.einsum("bxhtd,bhsd->bxhts", q, k)  # (kv_bsz, beams, heads, tgt_len, mem_len)
        if mask is None:
            probs = torch.softmax(scores.float(), dim=-1)
        else:
            probs = masked_softmax(scores, mask[:, None, :, None, :])
        return torch.einsum("bxhts,bhsd->bxhtd", self.dropout_module(probs).type_as(v), v), probs

    def _attend_fused(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor]) -> Tensor:
        """The same through SDPA, no score matrix. A head whose every key is masked gets zero
        weights, as ``masked_softmax`` gives it: its output is zeroed."""
        kv_bsz, beams, heads, tgt_len, head_dim = q.shape
        q = q.permute(0, 2, 1, 3, 4).reshape(kv_bsz, heads, beams * tgt_len, head_dim)
        bias = None if mask is None else torch.zeros_like(mask, dtype=q.dtype).masked_fill(
            mask, MASKED_SCORE if q.dtype == torch.float32 else torch.finfo(q.dtype).min)[:, :, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=attention_dropout(self), scale=1.0)
        if mask is not None:
            out = out * (~mask).any(dim=-1)[:, :, None, None].to(out.dtype)
        # (kv_bsz, heads, beams * tgt_len, head_dim) -> (kv_bsz, beams, heads, tgt_len, head_dim)
        return out.view(kv_bsz, heads, beams, tgt_len, head_dim).transpose(1, 2)

    def reorder_incremental_state(
        self, incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]], new_order: Tensor
    ):
        """Follow beam search: ``new_order`` picks decoder rows. A memory shared by the beams of
        a sentence only loses the sentences that finished (beams move within their sentence)."""
        buffer = self._get_input_buffer(incremental_state)
        if "prev_key" not in buffer:
            return incremental_state
        beams = buffer["beams_per_row"]
        rows = new_order if beams == 1 else new_order.view(-1, beams)[:, 0] // beams
        if beams > 1 and rows.numel() == buffer["prev_key"].size(0):
            return incremental_state  # no sentence finished: nothing to move
        for name, value in buffer.items():
            if isinstance(value, Tensor):
                buffer[name] = select_rows(value, rows)
        return self._set_input_buffer(incremental_state, buffer)


class HeposAttention(CrossAttention):
    """Eq. 1: head ``h`` attends to source positions ``i = h (mod stride)`` only."""

    def __init__(self, embed_dim: int, num_heads: int, stride: int = 4, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if not 1 <= stride <= num_heads:
            raise SettingError(f"--hepos-stride must be between 1 and the number of heads ({num_heads}) so that "
                               f"the heads cover every position, got {stride}")
        self.stride = stride

    def head_positions(self, src_len: int, device) -> Tensor:
        """(heads, ceil(src_len / stride)): the source positions of each head, h mod s, h mod s + s, ...
        Slots past the end (>= src_len) exist when src_len is not a multiple of the stride."""
        per_head = -(-src_len // self.stride)
        first = torch.arange(self.num_heads, device=device) % self.stride  # (heads,)
        return first[:, None] + torch.arange(per_head, device=device)[None, :] * self.stride

    def memory(self, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor]) -> Memory:
        kv_bsz, heads, src_len, head_dim = k.shape
        positions = self.head_positions(src_len, k.device)  # (heads, src_len / stride)
        past_end = positions >= src_len
        positions = positions.clamp(max=src_len - 1)
        index = positions[None, :, :, None].expand(kv_bsz, -1, -1, head_dim)
        k_heads = k.gather(2, index)  # (kv_bsz, heads, src_len / stride, head_dim)
        v_heads = v.gather(2, index)
        mask = past_end[None].expand(kv_bsz, -1, -1)  # (kv_bsz, heads, src_len / stride)
        if key_padding_mask is not None:
            mask = mask | key_padding_mask.bool()[:, positions]
        return k_heads, v_heads, mask

    def source_weights(self, probs: Tensor, src_len: int) -> Tensor:
        """Scatter each head's weights back to its positions: (bsz, heads, tgt_len, src_len)."""
        bsz, heads, tgt_len, per_head = probs.shape
        positions = self.head_positions(src_len, probs.device)  # distinct within a head
        full = probs.new_zeros(bsz, heads, tgt_len, per_head * self.stride)
        full.scatter_(3, positions[None, :, None, :].expand(bsz, -1, tgt_len, -1), probs)
        return full[..., :src_len]


class LinformerCrossAttention(CrossAttention):
    """Keys and values projected along the sequence to ``compressed`` rows (Wang et al. 2020),
    with decoder queries. Padding keys and values are zeroed before the projection, so the
    memory does not depend on how a batch was padded; its rows map to no source position, so
    no attention weights are returned."""

    def __init__(self, embed_dim: int, num_heads: int, max_source_positions: int = 1024, compressed: int = 256,
                 **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        self.compress_k = nn.Linear(max_source_positions, compressed, bias=False)  # E
        self.compress_v = nn.Linear(max_source_positions, compressed, bias=False)  # F

    def memory(self, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor]) -> Memory:
        src_len = k.size(2)
        if src_len > self.compress_k.in_features:
            raise ValueError(f"source of {src_len} tokens is longer than the Linformer projection "
                             f"({self.compress_k.in_features} positions)")
        if key_padding_mask is not None:
            keep = (~key_padding_mask.bool())[:, None, :, None].to(k.dtype)  # (kv_bsz, 1, src_len, 1)
            k, v = k * keep, v * keep
        k = torch.einsum("cs,bhsd->bhcd", self.compress_k.weight[:, :src_len].to(k.dtype), k)  # (kv_bsz, heads, k, head_dim)
        v = torch.einsum("cs,bhsd->bhcd", self.compress_v.weight[:, :src_len].to(v.dtype), v)
        return k, v, None

    def source_weights(self, probs: Tensor, src_len: int) -> None:
        return None
