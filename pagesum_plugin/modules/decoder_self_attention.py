"""Decoder self-attention through SDPA, with a cache written once per position.

fairseq's attention grows its cached keys and values by concatenation, a fresh copy of the
whole cache at every decoding step, and beam search reorders the cache before that with a
second fresh copy: over a summary of T tokens the traffic grows as T², for every page of
every beam. Here the cache is preallocated to the search's length (``set_cache_length``;
it doubles if a search runs past it) and each step writes only its new position, in place.

Beams reorder through an index table, never by moving the cache. The rows of the cache
form blocks of ``beams`` consecutive rows (the beams of one example, or of one page of
it), and beam search only ever moves a beam within its block. The cache is stored
(blocks, heads, beams, capacity, head_dim), and ``beam_of_position`` (rows, capacity) says,
for every row and position, which beam of the row's block wrote the key that the row
reads there. A reorder only re-indexes that small table (and, when examples finish,
drops their blocks). Attention reads the cache through the table without gathering it:
each query is scored against the keys of every beam of its block (one batched matmul,
which reads each key once), the score of the beam it follows is picked at each position,
and the softmax weights are scattered back so that one more matmul reads each value once.
That is ``beams`` times the arithmetic of a plain read, on a step that is bound by memory
traffic, not arithmetic.

Rows that repeat one another (``share_rows``: PageSum's first layer, whose page rows of a
hypothesis all carry the same summary prefix) are computed and cached once per group, and
every row is handed its group's output; beam search then reorders the groups.

A module whose block size is not known (``beams`` None) keeps one row per block and moves
its rows on a reorder (one copy), which is correct for any order. Reordering writes the
table (and moved rows) back in place while no example has been dropped.

A step given its position as a tensor (``modules/decoding_step.py``: a search whose steps
run as one captured graph) writes its position there and reads the whole preallocated
length, the positions after it masked: the same shapes at every step, and no count kept on
the host. The full (training)
forward pass runs through ``scaled_dot_product_attention``. A padding mask of the new
positions is kept per row and position like the table, unless the search declared that its
prefixes hold none (``decoding_step.declare_unpadded_prefixes``). Steps that fairseq's attention would
handle differently (an attention mask, bias or zero-attention keys, a cache filled by
someone else) take the one-copy path below, which computes fairseq's attention exactly
(``takes_fused_path``).
"""

import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.modules import MultiheadAttention
from torch import Tensor, nn

from .decoding_step import prefixes_unpadded, select_rows, step_position
from .fused_attention import attention_dropout

PENDING_ORDER = "pending_order"  # one-copy path: rows still to be reordered, (rows,) indices into the cached rows
DEFAULT_CACHE_LENGTH = 64  # positions preallocated when no search length was set
SHARING = ("first_row", "group_of_row")  # entries of a module whose rows come in identical groups


def set_cache_length(model: torch.nn.Module, length: int) -> None:
    """Tell every decoder self-attention of ``model`` how many positions the next search decodes."""
    for module in model.modules():
        if isinstance(module, DecoderSelfAttention):
            module.cache_length = length


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
        """The whole prefix at once: attn_mask (tgt_len, tgt_len) additive (fairseq's causal mask),
        key_padding_mask (rows, tgt_len) True at padding."""
        tgt_len, rows, embed_dim = query.shape
        # the first layer's input is the embeddings transposed: each projection would keep a
        # contiguous copy of its own for backward; one copy serves the three
        q, k, v = self._project(query.contiguous())
        mask = None if attn_mask is None else attn_mask.to(q.dtype)[None, None]  # (1, 1, tgt_len, tgt_len)
        if key_padding_mask is not None:
            padding = key_padding_mask.bool()[:, None, None, :]  # (rows, 1, 1, tgt_len)
            mask = (q.new_zeros(()) if mask is None else mask).masked_fill(padding, -math.inf)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=attention_dropout(self), scale=1.0)
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
            self._set_input_buffer(incremental_state, buffer)  # kept from now on, and written in place
        beams = buffer["beams"]
        blocks = rows // beams
        # q: (blocks, heads, 1, beams * tgt_len, head_dim), scaled; k, v: (blocks, heads, beams, tgt_len, head_dim)
        q, k, v = self._step_projections(query, blocks, beams, buffer.get("qkv_weight"), buffer.get("qkv_bias"))
        position = buffer.get("position")
        if position is not None:
            out, probs = self._step_at(position, q, k, v, padding, buffer, incremental_state)
            return self._output(out, probs, tgt_len, need_weights, need_head_weights)
        start = buffer["length"]
        end = start + tgt_len
        if end > buffer["cache_key"].size(3):
            buffer = self._grow(buffer, max(2 * buffer["cache_key"].size(3), end))
        cache_k, cache_v, table = buffer["cache_key"], buffer["cache_value"], buffer["beam_of_position"]
        cache_k[:, :, :, start:end] = k  # the new positions, written in place
        cache_v[:, :, :, start:end] = v
        table[:, start:end] = buffer["own_beam"][:, None]
        if padding is not None and "padding" not in buffer:  # (rows, capacity), reordered like the table
            buffer["padding"] = table.new_zeros(table.shape, dtype=torch.bool)
        if "padding" in buffer:
            buffer["padding"][:, start:end] = False if padding is None else padding
        buffer["length"] = end
        self._set_input_buffer(incremental_state, buffer)

        masked = buffer["padding"][:, :end] if "padding" in buffer else None
        out, probs = read_through_table(q, cache_k[:, :, :, :end], cache_v[:, :, :, :end], table[:, :end], start,
                                        self.dropout_module, masked)
        return self._output(out, probs, tgt_len, need_weights, need_head_weights)

    def _fused_projections(self) -> Optional[Tuple[Tensor, Tensor]]:
        """The query, key and value projections as one matrix (dim, 3 * dim) and its bias (3 * dim,),
        the query's scaled; None where they are not plain linear layers with a bias (one wrapped for
        quantization noise, say). The scaling is a power of two for head dimensions of 4, 16, 64
        or 256, so that folding it into the weights changes no bit."""
        projections = (self.q_proj, self.k_proj, self.v_proj)
        if any(type(p) is not nn.Linear or p.bias is None or p._forward_hooks or p._forward_pre_hooks
               for p in projections):
            return None
        weight = torch.cat([self.q_proj.weight * self.scaling, self.k_proj.weight, self.v_proj.weight])
        bias = torch.cat([self.q_proj.bias * self.scaling, self.k_proj.bias, self.v_proj.bias])
        return weight.t().contiguous(), bias  # (dim, 3 * dim), (3 * dim,)

    def _step_projections(self, query: Tensor, blocks: int, beams: int, qkv_weight: Optional[Tensor] = None,
                          qkv_bias: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
        """A step's projections in the layouts the cache reads and writes: query (tgt_len, rows, dim),
        rows = blocks * beams -> q (blocks, heads, 1, beams * tgt_len, head_dim), scaled, and
        k, v (blocks, heads, beams, tgt_len, head_dim). The rows are projected as one matrix, by
        the three projections fused (``_fused_projections``) where they are given."""
        tgt_len = query.size(0)
        x = query.reshape(tgt_len * blocks * beams, -1)  # (tgt_len * rows, dim)
        if qkv_weight is not None:
            # (tgt_len * rows, 3 * dim) -> (3, blocks, heads, beams, tgt_len, head_dim)
            qkv = torch.addmm(qkv_bias, x, qkv_weight).view(tgt_len, blocks, beams, 3, self.num_heads, self.head_dim)
            q, k, v = qkv.permute(3, 1, 4, 2, 0, 5).unbind(0)
        else:  # (tgt_len * rows, dim) each -> (blocks, heads, beams, tgt_len, head_dim)
            shape = (tgt_len, blocks, beams, self.num_heads, self.head_dim)
            q = (self.q_proj(x) * self.scaling).view(shape).permute(1, 3, 2, 0, 4)
            k, v = (proj(x).view(shape).permute(1, 3, 2, 0, 4) for proj in (self.k_proj, self.v_proj))
        return q.reshape(blocks, self.num_heads, 1, beams * tgt_len, self.head_dim), k, v

    def _step_at(self, position: Tensor, q: Tensor, k: Tensor, v: Tensor, padding: Optional[Tensor], buffer: Dict,
                 incremental_state) -> Tuple[Tensor, Tensor]:
        """A step of one position, at ``position`` (a 0-d tensor): written there in place, the whole
        preallocated length read with the positions after it masked. q: (blocks, heads, 1, beams,
        head_dim); k, v: (blocks, heads, beams, 1, head_dim); padding: (rows, 1) True where the new
        position is padding, or None."""
        if k.size(3) != 1:
            raise ValueError(f"a step at a position tensor decodes one position, not {k.size(3)}")
        cache_k, cache_v, table = buffer["cache_key"], buffer["cache_value"], buffer["beam_of_position"]
        at = position.view(1)
        cache_k.index_copy_(3, at, k)
        cache_v.index_copy_(3, at, v)
        table.index_copy_(1, at, buffer["own_beam"][:, None])
        if padding is not None and "padding" not in buffer:  # (rows, capacity), reordered like the table
            buffer["padding"] = table.new_zeros(table.shape, dtype=torch.bool)
        masked = torch.arange(table.size(1), device=q.device) > position  # (capacity,) not written yet
        if "padding" in buffer:
            if padding is not None:
                buffer["padding"].index_copy_(1, at, padding)
            masked = masked | buffer["padding"]  # (rows, capacity)
        return read_through_table(q, cache_k, cache_v, table, 0, self.dropout_module, masked)

    def _output(self, out: Tensor, probs: Tensor, tgt_len: int, need_weights: bool,
                need_head_weights: bool) -> Tuple[Tensor, Optional[Tensor]]:
        """out (blocks, heads, beams * tgt_len, head_dim) through the output projection, (tgt_len,
        rows, dim); and the weights, if asked, from probs (blocks, heads, 1, beams * tgt_len, length)."""
        blocks, heads, columns, head_dim = out.shape
        beams = columns // tgt_len
        out = out.view(blocks, heads, beams, tgt_len, head_dim).permute(3, 0, 2, 1, 4).reshape(
            tgt_len * blocks * beams, heads * head_dim)  # (tgt_len * rows, dim)
        out = self.out_proj(out).view(tgt_len, blocks * beams, -1)
        weights: Optional[Tensor] = None
        if need_weights:  # (heads, rows, tgt_len, length)
            weights = probs.view(blocks, heads, beams, tgt_len, -1).transpose(0, 1).reshape(
                heads, blocks * beams, tgt_len, -1)
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return out, weights

    def _allocate(self, buffer: Dict, rows: int, beams: int, capacity: int, like: Tensor) -> Dict:
        blocks, heads, head_dim = rows // beams, self.num_heads, self.head_dim
        own_beam = torch.arange(rows, device=like.device) % beams  # (rows,)
        buffer.update(  # zeros: a step at a position tensor reads the positions not written yet, masked
            cache_key=like.new_zeros(blocks, heads, beams, capacity, head_dim),
            cache_value=like.new_zeros(blocks, heads, beams, capacity, head_dim),
            beam_of_position=own_beam.new_zeros(rows, capacity),
            own_beam=own_beam, length=0, beams=beams,
        )
        return buffer

    @staticmethod
    def _grow(buffer: Dict, capacity: int) -> Dict:
        """A search that runs past the preallocated length: double it (one copy, rarely)."""
        length = buffer["length"]
        for name in ("cache_key", "cache_value", "beam_of_position", "padding"):
            if name not in buffer:
                continue
            old = buffer[name]
            dim = 3 if old.dim() == 5 else 1  # positions: (blocks, heads, beams, capacity, hd) or (rows, capacity)
            new = old.new_zeros(old.shape[:dim] + (capacity,) + old.shape[dim + 1:])
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
        table = buffer["beam_of_position"][:, :length]
        keys, values = (gather_rows(buffer[name][:, :, :, :length], table) for name in ("cache_key", "cache_value"))
        padding = buffer["padding"][:, :length] if "padding" in buffer else None
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


def read_through_table(q: Tensor, keys: Tensor, values: Tensor, table: Tensor, start: int,
                       dropout, masked: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Attention of each row over the positions its table points at.

    q:      (blocks, heads, 1, beams * tgt_len, head_dim), scaled: the queries of a block's rows,
            beam by beam; query i of a row sits at position start + i
    keys, values: (blocks, heads, beams, length, head_dim)
    table:  (rows, length) the beam of the row's block whose key the row reads at each position
    masked: (rows, length) or (length,) True where the row's key is padding, or None
    returns the output (blocks, heads, beams * tgt_len, head_dim) and the weights (blocks, heads,
    1, beams * tgt_len, length), fp32
    """
    blocks, heads, beams, length, head_dim = keys.shape
    tgt_len = q.size(3) // beams
    scores = torch.matmul(q, keys.transpose(-1, -2))  # (blocks, heads, beams, beams * tgt_len, length)
    # the key each query follows: (blocks, heads, 1, beams * tgt_len, length)
    index = table.view(blocks, 1, beams, 1, length).expand(blocks, heads, beams, tgt_len, length).reshape(
        blocks, heads, 1, beams * tgt_len, length)
    picked = scores.gather(2, index)
    if tgt_len > 1:  # query start + i reads positions up to start + i
        future = torch.arange(length, device=q.device)[None, :] > torch.arange(start, start + tgt_len,
                                                                            device=q.device)[:, None]
        picked = picked.masked_fill(future.repeat(beams, 1), -math.inf)
    if masked is not None and masked.dim() == 1:  # the same positions for every row
        picked = picked.masked_fill(masked, -math.inf)
    elif masked is not None:  # (rows, length) -> (blocks, 1, 1, beams * tgt_len, length)
        picked = picked.masked_fill(masked.view(blocks, 1, 1, beams, 1, length).expand(
            -1, -1, -1, -1, tgt_len, -1).reshape(blocks, 1, 1, beams * tgt_len, length), -math.inf)
    probs = torch.softmax(picked.float(), dim=-1)  # (blocks, heads, 1, beams * tgt_len, length)
    spread = torch.zeros_like(scores).scatter_(2, index, dropout(probs.type_as(scores)))
    return torch.matmul(spread, values).sum(dim=2), probs  # (blocks, heads, beams * tgt_len, head_dim)


def reorder_cache(buffer: Dict, new_order: Tensor) -> Dict:
    """Follow beam search (``new_order``: (new rows,) the row each new row continues).

    Trusted blocks: only the table is re-indexed, and the blocks of finished examples are
    dropped. Blocks of unknown structure (one row each): the rows themselves move."""
    beams = buffer["beams"]
    rows = buffer["beam_of_position"].size(0)
    if not buffer["trusted"]:  # one row per block: move rows, any order
        for name in ("cache_key", "cache_value"):
            buffer[name] = select_rows(buffer[name], new_order)
    elif new_order.size(0) != rows:  # examples finished: drop their blocks
        kept_blocks = new_order.view(-1, beams)[:, 0] // beams
        for name in ("cache_key", "cache_value"):
            buffer[name] = buffer[name].index_select(0, kept_blocks)
    if buffer["trusted"] and beams > 1:
        buffer["beam_of_position"] = select_rows(buffer["beam_of_position"], new_order)
    elif new_order.size(0) != rows:
        buffer["beam_of_position"] = buffer["beam_of_position"][: new_order.size(0)]
    if "padding" in buffer:  # per row, whatever the blocks
        buffer["padding"] = select_rows(buffer["padding"], new_order)
    buffer["own_beam"] = buffer["own_beam"][: new_order.size(0)]
    return buffer


def gather_rows(cache: Tensor, table: Tensor) -> Tensor:
    """(blocks, heads, beams, length, head_dim) read through ``table`` (rows, length) ->
    (rows, heads, length, head_dim), each row's own keys."""
    blocks, heads, beams, length, head_dim = cache.shape
    rows = cache.permute(0, 2, 1, 3, 4)  # (blocks, beams, heads, length, head_dim)
    block_of_row = torch.arange(table.size(0), device=table.device) // beams  # (rows,)
    positions = torch.arange(length, device=table.device)
    picked = rows[block_of_row[:, None], table, :, positions[None, :]]  # (rows, length, heads, head_dim)
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
