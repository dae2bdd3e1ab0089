"""Decoder self-attention through SDPA, with a cache written once per position.

fairseq's attention grows its cached keys and values by concatenation, a fresh copy of the
whole cache at every decoding step, and beam search reorders the cache before that with a
second fresh copy: over a summary of T tokens the traffic grows as T², for every page of
every beam. Here the cache is preallocated to the search's length (``set_cache_length``;
it doubles if a search runs past it) and each step writes only its new position, in place.

Beams reorder through an index table, never by moving the cache. The rows of the cache
form blocks of ``beams`` consecutive rows (the beams of one example, or of one page of
it), and beam search only ever moves a beam within its block. The cache is stored
(blocks, heads, capacity, beams, head_dim), and the table ``readable`` (rows, capacity,
beams) says, for every row and position, which beam of the row's block wrote the key that
the row reads there: 0 at that beam, -inf at the others, and -inf at every beam of a
position that is padding or not written yet. A reorder only re-indexes that small table
(and, when examples finish, drops their blocks). Attention reads the cache through the
table without gathering it: a block's queries attend, in one SDPA call, over the keys of
every position and beam of the block, the table (a view of it) as the additive mask. That
reads each key and value once, at ``beams`` times the arithmetic of a plain read, on a step
that is bound by memory traffic and by launches, not arithmetic; and it keeps a step's
operators for the table at a write and a read.

Rows that repeat one another (``share_rows``: PageSum's first layer, whose page rows of a
hypothesis all carry the same summary prefix) are computed and cached once per group, and
every row is handed its group's output; beam search then reorders the groups.

A module whose block size is not known (``beams`` None) keeps one row per block and moves
its rows on a reorder (one copy), which is correct for any order. Reordering writes the
table (and moved rows) back in place while no example has been dropped.

A step given its position as a tensor (``modules/decoding_step.py``: a search whose steps
run as one captured graph) writes its position there and reads the whole preallocated
length, the positions after it unreadable in the table: the same shapes at every step, and no
count kept on the host. The full (training) forward pass runs through
``scaled_dot_product_attention`` told that it is causal, with no mask, which on CUDA is the
flash kernel: the decoder's mask is causal, and its summaries are padded on the right, where
no position before the padding reads it. Padding among the new positions makes them unreadable in
the table; the steps of a search that declared its prefixes free of padding
(``decoding_step.declare_unpadded_prefixes``) leave aside the padding mask the decoder hands
them. Steps that fairseq's attention would handle differently (an attention mask, bias or
zero-attention keys, a cache filled by someone else) take the one-copy path below, which
computes fairseq's attention exactly (``takes_fused_path``).
"""

import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.modules import MultiheadAttention
from torch import Tensor

from .decoding_step import is_plain_linear, linear_step, prefixes_unpadded, select_rows, step_position, \
    transposed_weight
from .fused_attention import attention_dropout

PENDING_ORDER = "pending_order"  # one-copy path: rows still to be reordered, (rows,) indices into the cached rows
DEFAULT_CACHE_LENGTH = 64  # positions preallocated when no search length was set
SHARING = ("first_row", "group_of_row")  # entries of a module whose rows come in identical groups


def set_cache_length(model: torch.nn.Module, length: int) -> None:
    """Tell every decoder self-attention of ``model`` how many positions the next search decodes."""
    for module in model.modules():
        if isinstance(module, DecoderSelfAttention):
            module.cache_length = length


def set_read_length(model: torch.nn.Module, length: Optional[int]) -> None:
    """Tell every decoder self-attention of ``model`` how many of its cache's positions a step at
    a position tensor reads (the positions to come are masked in any case); None: all of them."""
    for module in model.modules():
        if isinstance(module, DecoderSelfAttention):
            module.read_length = length


def set_fixed_shapes(model: torch.nn.Module, fixed: bool) -> None:
    """Tell every decoder self-attention of ``model`` whether the next search gives its steps
    their position as a tensor (``modules/decoding_step.py``)."""
    for module in model.modules():
        if isinstance(module, DecoderSelfAttention):
            module.fixed_shapes = fixed


def set_cache_beams(model: torch.nn.Module, beams: Optional[int]) -> None:
    """Tell every decoder self-attention of ``model`` that its rows come in blocks of ``beams``
    consecutive rows that beam search reorders only among themselves (None: not so)."""
    for module in model.modules():
        if isinstance(module, DecoderSelfAttention):
            module.beams = beams


class DecoderSelfAttention(MultiheadAttention):
    """fairseq's decoder self-attention: SDPA in training, an in-place cache in decoding."""

    cache_length: int = DEFAULT_CACHE_LENGTH
    beams: Optional[int] = None
    fixed_shapes: bool = False  # the search gives its steps their position as a tensor
    read_length: Optional[int] = None  # positions a step at a position tensor reads; None: the whole cache

    def takes_fused_path(self, before_softmax: bool = False) -> bool:
        """Whether this attention runs through SDPA and the in-place cache: a self-attention
        without bias or zero-attention keys, asked for its output (not its scores); else
        fairseq's computation, with the one-copy cache in decoding."""
        return (self.self_attention and not before_softmax and self.bias_k is None and not self.add_zero_attn
                and not self.onnx_trace)

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None, need_weights: bool = True,
                static_kv: bool = False, attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        args = (query, key, value, key_padding_mask, incremental_state, need_weights, static_kv, attn_mask,
                before_softmax, need_head_weights)
        plain = self.takes_fused_path(before_softmax)
        if incremental_state is None:
            if (plain and key is query and not (need_weights or need_head_weights)
                    and (attn_mask is None or attn_mask.is_floating_point())):
                return self._full_forward(query, key_padding_mask, attn_mask), None
            return super().forward(*args)
        buffer = self._get_input_buffer(incremental_state)
        if key_padding_mask is not None and prefixes_unpadded(incremental_state):
            key_padding_mask = None  # all False: no mask is kept, written, read or reordered
        if plain and attn_mask is None and "prev_key" not in buffer and (
                key_padding_mask is None or key_padding_mask.shape == query.shape[1::-1]):
            return self._cached_step(query, key_padding_mask, buffer, incremental_state,
                                     need_weights or need_head_weights, need_head_weights)
        if "cache_key" in buffer:  # an unusual step after fused ones: continue in fairseq's layout
            buffer = self._to_fairseq_layout(buffer)
            self._set_input_buffer(incremental_state, buffer)
        elif "group_of_row" in buffer:  # nothing cached yet: the one-copy path keeps every row
            buffer = {name: value for name, value in buffer.items() if name not in SHARING}
            self._set_input_buffer(incremental_state, buffer)
        return self._one_copy_forward(buffer, *args)

    # ------------------------------------------------------------------ training

    def _project(self, query: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """(tgt_len, rows, dim) -> q (scaled), k, v: (rows, heads, tgt_len, head_dim)."""
        tgt_len, rows, _ = query.shape

        def heads(x: Tensor) -> Tensor:
            return x.view(tgt_len, rows, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        return heads(self.q_proj(query) * self.scaling), heads(self.k_proj(query)), heads(self.v_proj(query))

    def _full_forward(self, query: Tensor, key_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor]) -> Tensor:
        """The whole prefix at once. attn_mask: the decoder's causal mask (fairseq's
        ``buffered_future_mask``, (tgt_len, tgt_len)) or None (full context, no mask);
        key_padding_mask (rows, tgt_len) True at padding, which a summary holds only after its
        last token (fairseq pads targets on the right)."""
        tgt_len, rows, embed_dim = query.shape
        # the first layer's input is the embeddings transposed: each projection would keep a
        # contiguous copy of its own for backward; one copy serves the three
        q, k, v = self._project(query.contiguous())
        dropout_p = attention_dropout(self)
        if attn_mask is not None:
            # causal: a position reads itself and those before it, never the padding that follows
            # its summary, so the padding mask changes nothing a loss reads (only the outputs at
            # padding positions); without a mask SDPA runs its flash kernel, causal blocks skipped
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, scale=1.0)
        else:
            mask = None  # full context: only the padding is masked, (rows, 1, 1, tgt_len)
            if key_padding_mask is not None:
                mask = q.new_zeros(()).masked_fill(key_padding_mask.bool()[:, None, None, :], -math.inf)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=1.0)
        return self.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, rows, embed_dim))

    # ------------------------------------------------------------------ decoding

    def share_rows(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], first_row: Tensor,
                   group_of_row: Tensor) -> None:
        """The rows this attention is given come in groups of identical rows, prefix and all (at
        PageSum's first decoder layer, a hypothesis's row for each of its pages). From the next
        step on it computes and caches one row per group, and hands every row its group's output.

        first_row: (groups,) one row of each group; group_of_row: (rows,) the group of each row.
        The groups form blocks of ``beams`` as rows would; beam search reorders them through
        ``reorder_groups``."""
        buffer = self._get_input_buffer(incremental_state)
        buffer.update(first_row=first_row, group_of_row=group_of_row)
        self._set_input_buffer(incremental_state, buffer)

    def reorder_groups(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], group_order: Tensor,
                       row_order: Tensor, first_row: Tensor, group_of_row: Tensor) -> None:
        """Follow beam search: ``group_order`` orders the groups (the hypotheses), ``row_order``
        the rows, and ``first_row`` / ``group_of_row`` describe the new rows' groups. A module
        that shares no rows (any more, or never did) reorders its rows."""
        if "group_of_row" not in self._get_input_buffer(incremental_state):
            self.reorder_incremental_state(incremental_state, row_order)
            return
        self.reorder_incremental_state(incremental_state, group_order)
        self.share_rows(incremental_state, first_row, group_of_row)

    def _cached_step(self, query: Tensor, padding: Optional[Tensor], buffer: Dict, incremental_state,
                     need_weights: bool, need_head_weights: bool) -> Tuple[Tensor, Optional[Tensor]]:
        """One step: query (tgt_len, rows, dim); padding (rows, tgt_len) True where a new position
        is padding, or None."""
        group_of_row = buffer.get("group_of_row")
        if group_of_row is None:
            return self._step_rows(query, padding, buffer, incremental_state, need_weights, need_head_weights)
        first_row = buffer["first_row"]  # (groups,)
        out, weights = self._step_rows(query.index_select(1, first_row),  # (tgt_len, groups, dim)
                                       None if padding is None else padding.index_select(0, first_row),
                                       buffer, incremental_state, need_weights, need_head_weights)
        out = out.index_select(1, group_of_row)  # (tgt_len, rows, dim)
        if weights is not None:  # ([heads,] groups, tgt_len, length) -> ([heads,] rows, tgt_len, length)
            weights = weights.index_select(-3, group_of_row)
        return out, weights

    def _step_rows(self, query: Tensor, padding: Optional[Tensor], buffer: Dict, incremental_state,
                   need_weights: bool, need_head_weights: bool) -> Tuple[Tensor, Optional[Tensor]]:
        """One step of every row given: the new positions written in place, the cache read
        through the beam table."""
        tgt_len, rows, embed_dim = query.shape
        if "cache_key" not in buffer:
            beams = self.beams if self.beams and rows % self.beams == 0 else 1
            buffer = self._allocate(buffer, rows, beams, max(self.cache_length, tgt_len), query)
            buffer["trusted"] = self.beams is not None and rows % self.beams == 0
            position = step_position(incremental_state) if self.fixed_shapes else None
            if position is not None:  # read once: the later steps find it with the cache
                buffer["position"] = position
            fused = self._fused_projections()
            if fused is not None:  # for this search: the steps project the rows once, not three times
                buffer["qkv_weight"], buffer["qkv_bias"] = fused
            out_weight = transposed_weight(self.out_proj)
            if out_weight is not None:
                buffer["out_weight"] = out_weight
            self._set_input_buffer(incremental_state, buffer)  # kept from now on, and written in place
        beams = buffer["beams"]
        blocks = rows // beams
        # q: (blocks, heads, tgt_len * beams, head_dim), scaled; k, v: (blocks, heads, tgt_len, beams, head_dim)
        q, k, v = self._step_projections(query, blocks, beams, buffer.get("qkv_weight"), buffer.get("qkv_bias"))
        position = buffer.get("position")
        if position is not None:
            out, probs = self._step_at(position, q, k, v, padding, buffer, need_weights)
            return self._output(out, probs, tgt_len, need_weights, need_head_weights, buffer.get("out_weight"))
        start = buffer["length"]
        end = start + tgt_len
        if end > buffer["cache_key"].size(2):
            buffer = self._grow(buffer, max(2 * buffer["cache_key"].size(2), end))
        cache_k, cache_v, readable = buffer["cache_key"], buffer["cache_value"], buffer["readable"]
        cache_k[:, :, start:end] = k  # the new positions, written in place
        cache_v[:, :, start:end] = v
        readable[:, start:end] = own_entries(buffer["own_beam"], padding)
        buffer["length"] = end
        self._set_input_buffer(incremental_state, buffer)

        # (blocks, 1, tgt_len * beams, end * beams); a single position reads every position up to its own
        mask = read_mask(readable[:, :end], beams, start if tgt_len > 1 else None)
        out, probs = attend_through_table(q, cache_k[:, :, :end], cache_v[:, :, :end], mask, attention_dropout(self),
                                          need_weights)
        return self._output(out, probs, tgt_len, need_weights, need_head_weights, buffer.get("out_weight"))

    def _fused_projections(self) -> Optional[Tuple[Tensor, Tensor]]:
        """The query, key and value projections as one matrix (dim, 3 * dim) and its bias (3 * dim,),
        the query's scaled; None where they are not plain linear layers with a bias (one wrapped for
        quantization noise, say). The scaling is a power of two for head dimensions of 4, 16, 64
        or 256, so that folding it into the weights changes no bit."""
        if not all(is_plain_linear(p) for p in (self.q_proj, self.k_proj, self.v_proj)):
            return None
        weight = torch.cat([self.q_proj.weight * self.scaling, self.k_proj.weight, self.v_proj.weight])
        bias = torch.cat([self.q_proj.bias * self.scaling, self.k_proj.bias, self.v_proj.bias])
        return weight.t().contiguous(), bias  # (dim, 3 * dim), (3 * dim,)

    def _step_projections(self, query: Tensor, blocks: int, beams: int, qkv_weight: Optional[Tensor] = None,
                          qkv_bias: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
        """A step's projections in the layouts the cache reads and writes: query (tgt_len, rows, dim),
        rows = blocks * beams -> q (blocks, heads, tgt_len * beams, head_dim), scaled, and
        k, v (blocks, heads, tgt_len, beams, head_dim). The rows are projected as one matrix, by
        the three projections fused (``_fused_projections``) where they are given."""
        tgt_len = query.size(0)
        x = query.reshape(tgt_len * blocks * beams, -1)  # (tgt_len * rows, dim)
        if qkv_weight is not None:
            # (tgt_len * rows, 3 * dim) -> (3, blocks, heads, tgt_len, beams, head_dim)
            qkv = torch.addmm(qkv_bias, x, qkv_weight).view(tgt_len, blocks, beams, 3, self.num_heads, self.head_dim)
            q, k, v = qkv.permute(3, 1, 4, 0, 2, 5).unbind(0)
        else:  # (tgt_len * rows, dim) each -> (blocks, heads, tgt_len, beams, head_dim)
            shape = (tgt_len, blocks, beams, self.num_heads, self.head_dim)
            q = (self.q_proj(x) * self.scaling).view(shape).permute(1, 3, 0, 2, 4)
            k, v = (proj(x).view(shape).permute(1, 3, 0, 2, 4) for proj in (self.k_proj, self.v_proj))
        return q.reshape(blocks, self.num_heads, tgt_len * beams, self.head_dim), k, v

    def _step_at(self, position: Tensor, q: Tensor, k: Tensor, v: Tensor, padding: Optional[Tensor], buffer: Dict,
                 need_weights: bool) -> Tuple[Tensor, Optional[Tensor]]:
        """A step of one position, at ``position`` (a 0-d tensor): written there in place, the first
        ``read_length`` positions read (all the preallocated ones if None; the search makes it
        cover the position), those after it masked. q: (blocks, heads, beams, head_dim); k, v:
        (blocks, heads, 1, beams, head_dim); padding: (rows, 1) True where the new position is
        padding, or None."""
        if k.size(2) != 1:
            raise ValueError(f"a step at a position tensor decodes one position, not {k.size(2)}")
        cache_k, cache_v, readable = buffer["cache_key"], buffer["cache_value"], buffer["readable"]
        at = position.view(1)
        cache_k.index_copy_(2, at, k)
        cache_v.index_copy_(2, at, v)
        readable.index_copy_(1, at, own_entries(buffer["own_beam"], padding))  # later positions stay -inf
        if self.read_length is not None and self.read_length < cache_k.size(2):
            read = self.read_length
            cache_k, cache_v, readable = cache_k[:, :, :read], cache_v[:, :, :read], readable[:, :read]
        mask = read_mask(readable, buffer["beams"])  # (blocks, 1, beams, positions read * beams)
        return attend_through_table(q, cache_k, cache_v, mask, attention_dropout(self), need_weights)

    def _output(self, out: Tensor, probs: Optional[Tensor], tgt_len: int, need_weights: bool,
                need_head_weights: bool, out_weight: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
        """out (blocks, heads, tgt_len * beams, head_dim) through the output projection (its weight
        transposed for the search, if given), (tgt_len, rows, dim); and the weights, if asked, from
        probs (blocks, heads, tgt_len * beams, length)."""
        blocks, heads, columns, head_dim = out.shape
        beams = columns // tgt_len
        if tgt_len == 1:  # (blocks, beams, heads, head_dim) -> (rows, dim)
            out = out.transpose(1, 2).reshape(blocks * beams, heads * head_dim)
        else:  # (tgt_len, blocks, beams, heads, head_dim) -> (tgt_len * rows, dim)
            out = out.view(blocks, heads, tgt_len, beams, head_dim).permute(2, 0, 3, 1, 4).reshape(
                tgt_len * blocks * beams, heads * head_dim)
        out = linear_step(self.out_proj, out, out_weight).view(tgt_len, blocks * beams, -1)
        weights: Optional[Tensor] = None
        if need_weights:  # (heads, rows, tgt_len, length)
            weights = probs.view(blocks, heads, tgt_len, beams, -1).permute(1, 0, 3, 2, 4).reshape(
                heads, blocks * beams, tgt_len, -1)
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return out, weights

    def _allocate(self, buffer: Dict, rows: int, beams: int, capacity: int, like: Tensor) -> Dict:
        blocks, heads, head_dim = rows // beams, self.num_heads, self.head_dim
        beam_of_row = torch.arange(rows, device=like.device) % beams  # (rows,)
        is_own = torch.arange(beams, device=like.device) == beam_of_row[:, None]  # (rows, beams)
        buffer.update(  # zeros: a step at a position tensor reads the positions not written yet (weight 0)
            cache_key=like.new_zeros(blocks, heads, capacity, beams, head_dim),
            cache_value=like.new_zeros(blocks, heads, capacity, beams, head_dim),
            readable=like.new_full((rows, capacity, beams), -math.inf),  # nothing written: nothing readable
            # what a row writes into the table at its new position: 0 at its own beam, -inf elsewhere
            own_beam=like.new_full((rows, 1, beams), -math.inf).masked_fill(is_own[:, None], 0.0),
            length=0, beams=beams,
        )
        return buffer

    @staticmethod
    def _grow(buffer: Dict, capacity: int) -> Dict:
        """A search that runs past the preallocated length: double it (one copy, rarely)."""
        length = buffer["length"]
        for name in ("cache_key", "cache_value", "readable"):
            old = buffer[name]
            # positions: (blocks, heads, capacity, beams, hd) or, in the table, (rows, capacity, beams)
            dim = 2 if old.dim() == 5 else 1
            new = old.new_full(old.shape[:dim] + (capacity,) + old.shape[dim + 1:], -math.inf if dim == 1 else 0.0)
            new.narrow(dim, 0, length).copy_(old.narrow(dim, 0, length))
            buffer[name] = new
        return buffer

    def reorder_incremental_state(self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], new_order: Tensor):
        buffer = self._get_input_buffer(incremental_state)
        if "cache_key" in buffer:
            return self._set_input_buffer(incremental_state, reorder_cache(buffer, new_order))
        if "prev_key" not in buffer:
            return incremental_state
        pending = buffer.get(PENDING_ORDER)
        # the rows are now cached[pending][new_order] = cached[pending[new_order]]
        buffer[PENDING_ORDER] = new_order if pending is None else pending.index_select(0, new_order)
        return self._set_input_buffer(incremental_state, buffer)

    def _to_fairseq_layout(self, buffer: Dict) -> Dict:
        """The cache as fairseq keeps it: prev_key/prev_value (rows, heads, length, head_dim)."""
        length = buffer["length"]
        readable = buffer["readable"][:, :length]  # (rows, length, beams)
        table = readable.argmax(dim=-1)  # (rows, length): the beam read at each position (0 at padding)
        keys, values = (gather_rows(buffer[name][:, :, :length], table) for name in ("cache_key", "cache_value"))
        padding = readable.isinf().all(dim=-1)  # (rows, length): no beam read
        padding = padding if padding.any() else None  # fairseq's layout keeps no mask without padding
        if "group_of_row" in buffer:  # one cached row per group: every row gets its own again
            group_of_row = buffer["group_of_row"]
            keys, values = keys.index_select(0, group_of_row), values.index_select(0, group_of_row)
            padding = None if padding is None else padding.index_select(0, group_of_row)
        return {"prev_key": keys, "prev_value": values, "prev_key_padding_mask": padding}

    # ------------------------------------------------------------------ one copy per step

    def _one_copy_forward(self, buffer: Dict, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                          key_padding_mask: Optional[Tensor], incremental_state, need_weights: bool, static_kv: bool,
                          attn_mask: Optional[Tensor], before_softmax: bool,
                          need_head_weights: bool) -> Tuple[Tensor, Optional[Tensor]]:
        """The cache in fairseq's layout, the reorder applied while extending it (one copy per
        step); anything unusual through fairseq's own attention."""
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


def own_entries(own_beam: Tensor, padding: Optional[Tensor] = None) -> Tensor:
    """What the rows write into the table at their new positions: own_beam (rows, 1, beams), 0 at the
    row's own beam and -inf elsewhere; padding (rows, tgt_len) True where a new position is
    padding (-inf at every beam), or None."""
    return own_beam if padding is None else own_beam.masked_fill(padding[:, :, None], -math.inf)


def read_mask(readable: Tensor, beams: int, start: Optional[int] = None) -> Tensor:
    """The table as an SDPA mask over the cache's (length, beams) keys: a view of it for one query
    a row, the later positions masked for several.

    readable: (rows, length, beams), 0 where the row reads that beam's key at that position
    start:    None for one query a row; else the position of the first of the step's queries,
              one a position up to the end, each reading the positions up to its own
    returns   (blocks, 1, queries * beams, length * beams), additive
    """
    rows, length, _ = readable.shape
    blocks = rows // beams
    if start is None:
        return readable.view(blocks, 1, beams, length * beams)
    positions = torch.arange(start, length, device=readable.device)  # (tgt_len,)
    future = torch.arange(length, device=readable.device) > positions[:, None]  # (tgt_len, length)
    mask = readable.view(blocks, 1, 1, beams, length, beams).masked_fill(future[:, None, :, None], -math.inf)
    return mask.view(blocks, 1, -1, length * beams)  # (blocks, 1, tgt_len * beams, length * beams)


def attend_through_table(q: Tensor, keys: Tensor, values: Tensor, mask: Tensor, dropout_p: float = 0.0,
                         need_probs: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
    """Attention of each query over the cached keys its table lets it read.

    q:       (blocks, heads, queries, head_dim), scaled
    keys, values: (blocks, heads, length, beams, head_dim), the cache
    mask:    (blocks, 1, queries, length * beams) from ``read_mask``, additive
    returns the output (blocks, heads, queries, head_dim), and, if asked, the weights of each
    position (blocks, heads, queries, length), fp32. Asked, the scores are computed densely, as a
    reference computes them; else in one SDPA call.
    """
    blocks, heads, length, beams, head_dim = keys.shape
    keys = keys.flatten(2, 3)  # (blocks, heads, length * beams, head_dim)
    values = values.flatten(2, 3)
    if not need_probs:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, dropout_p=dropout_p,
                                              scale=1.0), None
    scores = torch.matmul(q, keys.transpose(-1, -2)) + mask
    probs = torch.softmax(scores.float(), dim=-1)  # (blocks, heads, queries, length * beams)
    out = torch.matmul(F.dropout(probs, dropout_p).type_as(values), values)
    return out, probs.view(blocks, heads, -1, length, beams).sum(dim=-1)


def reorder_cache(buffer: Dict, new_order: Tensor) -> Dict:
    """Follow beam search (``new_order``: (new rows,) the row each new row continues).

    Trusted blocks: only the table is re-indexed, and the blocks of finished examples are
    dropped. Blocks of unknown structure (one row each): the rows themselves move."""
    beams = buffer["beams"]
    rows = buffer["readable"].size(0)
    if not buffer["trusted"]:  # one row per block: move rows, any order
        for name in ("cache_key", "cache_value"):
            buffer[name] = select_rows(buffer[name], new_order)
    elif new_order.size(0) != rows:  # examples finished: drop their blocks
        kept_blocks = new_order.view(-1, beams)[:, 0] // beams
        for name in ("cache_key", "cache_value"):
            buffer[name] = buffer[name].index_select(0, kept_blocks)
    buffer["readable"] = select_rows(buffer["readable"], new_order)  # each row's table, padding and all
    if new_order.size(0) != rows:
        buffer["own_beam"] = buffer["own_beam"][: new_order.size(0)]
    return buffer


def gather_rows(cache: Tensor, table: Tensor) -> Tensor:
    """(blocks, heads, length, beams, head_dim) read through ``table`` (rows, length) ->
    (rows, heads, length, head_dim), each row's own keys."""
    blocks, heads, length, beams, head_dim = cache.shape
    by_position = cache.permute(0, 2, 3, 1, 4)  # (blocks, length, beams, heads, head_dim)
    block_of_row = torch.arange(table.size(0), device=table.device) // beams  # (rows,)
    positions = torch.arange(length, device=table.device)
    picked = by_position[block_of_row[:, None], positions[None, :], table]  # (rows, length, heads, head_dim)
    return picked.transpose(1, 2).contiguous()


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
