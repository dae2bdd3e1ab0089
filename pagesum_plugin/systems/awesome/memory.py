"""External memories of AWESOME (Cao and Wang; Sec. 3.1): what a layer carries from one
document segment to the next, and the encoder and decoder layers that read it.

Layout. A layer's memory is ``MemorySlots``: ``values`` (rows, m, dim) and ``empty``
(rows, m) bool, True where a slot holds nothing yet (the compressive memory fills up
over segments; the attentive memory is always full). Rows are documents (or beams).

Writing is lazy. After segment t a layer stores a ``PendingWrite``: the segment's states
(H^t, detached) and the slots its write starts from. The write itself (Eq. 1-6 or 9-12)
runs when segment t+1 reads the memory, inside segment t+1's graph, and the task
back-propagates each segment's loss before the next segment runs. So:

* gradients stop at the segment activations: no loss reaches an earlier segment's
  encoder or decoder (the ``SG`` of Eq. 2 and 12);
* gradients do cross segments through the memory itself (Eq. 9 and 5 stop nothing on
  M^{t-1}), truncated to a window of K writes (``--memory-grad-segments K``): segment t
  replays, in its own graph, the writes of segments t-K .. t-1 from their stored states,
  starting from M^{t-1-K} (detached), or from the learned M^0 itself when the window
  reaches back to it. The loss of segment t thus trains the write weights of those K
  writes and, for t <= K + 1, the initial memory M^0. K = 0 replays every earlier write;
* each segment's graph holds at most K writes per memory layer, however many segments a
  document has, so the peak memory of training does not grow with the document (App. C.2);
* a write that may be replayed draws its dropout from a seed recorded when its segment
  ended, so every replay computes the M^t that the next segment read.

``SegmentMemory`` carries the pending writes of all memory layers of a batch from one
segment to the next; the model reads and advances it in place, as fairseq passes its
incremental decoding state.
"""

import contextlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from fairseq.modules import LayerNorm
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase

from ...modules.fused_attention import FusedCrossAttention
from ...modules.fused_layer import FusedAttentionLayer

MEMORY_KINDS = ("attentive", "compressive", "none")


# --------------------------------------------------------------------------- state


@dataclass
class MemorySlots:
    values: Tensor  # (rows, m, dim)
    empty: Tensor  # (rows, m) bool, True where a slot holds nothing yet
    filled: bool = False  # known on the host: no slot is empty (the attentive memory's always)

    @staticmethod
    def full(values: Tensor) -> "MemorySlots":
        """Slots that all hold something (the attentive memory's): values (rows, m, dim)."""
        return MemorySlots(values, values.new_zeros(values.shape[:2], dtype=torch.bool), filled=True)

    def index_select(self, rows: Tensor) -> "MemorySlots":
        return MemorySlots(self.values.index_select(0, rows), self.empty.index_select(0, rows), self.filled)

    def detach(self) -> "MemorySlots":
        return MemorySlots(self.values.detach(), self.empty, self.filled)

    def key_padding_mask(self) -> Optional[Tensor]:
        """(rows, m) for attention, or None when every slot is filled (the common case: asked of
        the device only when the host does not know it)."""
        return None if self.filled or not bool(self.empty.any()) else self.empty


@dataclass
class SegmentStates:
    """What one segment writes into a layer's memory: its states H^t, detached (the SG of
    Eq. 2 and 12), their padding, and, when the write may be replayed, the seed of the
    random generator its dropout draws from (None: the running generator)."""

    states: Tensor  # (rows, len, dim)
    padding: Tensor  # (rows, len) bool
    seed: Optional[int] = None

    def index_select(self, rows: Tensor) -> "SegmentStates":
        return SegmentStates(self.states.index_select(0, rows), self.padding.index_select(0, rows), self.seed)


@dataclass
class PendingWrite:
    """One layer's memory between two segments: the writes of the last k segments (k <= K),
    oldest first, and the slots the first of them starts from (detached; None: the
    initial memory M^0, which stays in the graph)."""

    slots: Optional[MemorySlots]
    writes: List[SegmentStates] = field(default_factory=list)

    def index_select(self, rows: Tensor) -> "PendingWrite":
        return PendingWrite(None if self.slots is None else self.slots.index_select(rows),
                            [write.index_select(rows) for write in self.writes])


class SegmentMemory:
    """The pending writes of every memory layer of a batch (encoder, then decoder), carried
    from one segment to the next. Empty before the first segment."""

    def __init__(self):
        self.encoder: Optional[List[PendingWrite]] = None
        self.decoder: Optional[List[PendingWrite]] = None

    @property
    def started(self) -> bool:
        return self.encoder is not None or self.decoder is not None

    def select(self, rows: Tensor) -> None:
        """Keep only ``rows`` (documents that have another segment), in that order."""
        if self.encoder is not None:
            self.encoder = [write.index_select(rows) for write in self.encoder]
        if self.decoder is not None:
            self.decoder = [write.index_select(rows) for write in self.decoder]


def write_seed() -> int:
    """A seed for the dropout of a write that may be replayed, drawn from the running generator."""
    return int(torch.randint(2 ** 62, ()))


@contextlib.contextmanager
def seeded(seed: Optional[int], device: torch.device):
    """Run the block with the random generators of the CPU and ``device`` seeded with ``seed``,
    then restore the running ones; with None, run it on the running generators."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.random.default_generator.manual_seed(seed)
        if device.type == "cuda":
            with torch.cuda.device(device):
                torch.cuda.manual_seed(seed)
        yield


def replay(memory: nn.Module, pending: Optional[PendingWrite], rows: int, like: Tensor) -> List[MemorySlots]:
    """The window of a layer's memory, in the current graph: its start (M^{t-1-k}, or M^0)
    and the slots after each of its k writes; the last entry is M^{t-1}, what segment t
    reads. ``like``: a tensor of the model's dtype and device."""
    chain = [memory.initial_slots(rows, like) if pending is None or pending.slots is None else pending.slots]
    for write in pending.writes if pending is not None else []:
        with seeded(write.seed, write.states.device):
            chain.append(memory.write(chain[-1], write.states, write.padding))
    return chain


def advance(pending: Optional[PendingWrite], chain: List[MemorySlots], written: SegmentStates,
            window: int) -> PendingWrite:
    """The pending write after a segment that read the window ``chain`` (from ``replay``) and
    wrote ``written``: the window's writes and this one, the oldest dropped while more than
    ``window`` remain (0: none is dropped), the slots after the last dropped one becoming
    the new start, detached."""
    writes = (pending.writes if pending is not None else []) + [written]
    dropped = max(len(writes) - window, 0) if window else 0
    if not dropped:
        return PendingWrite(pending.slots if pending is not None else None, writes)
    return PendingWrite(chain[dropped].detach(), writes[dropped:])


# --------------------------------------------------------------------------- Eq. 9-12


class GatedMemoryUpdate(nn.Module):
    """The attentive memory's write (Eq. 9-12, after MART):

        S = Attn(M, SG(H), SG(H))          queries: the slots; keys and values: the segment
        U = tanh(W_u1 M + W_u2 S)
        G = sigmoid(W_g1 M + W_g2 S)
        M' = G * U + (1 - G) * M

    Each sum of two projections carries one bias (that of ``W_*2``)."""

    def __init__(self, embed_dim: int, heads: int, attention_dropout: float = 0.0):
        super().__init__()
        self.attn = FusedCrossAttention(embed_dim, heads, dropout=attention_dropout, encoder_decoder_attention=True)
        self.w_u1 = nn.Linear(embed_dim, embed_dim, bias=False)
        self.w_u2 = nn.Linear(embed_dim, embed_dim)
        self.w_g1 = nn.Linear(embed_dim, embed_dim, bias=False)
        self.w_g2 = nn.Linear(embed_dim, embed_dim)

    def forward(self, memory: Tensor, states: Tensor, padding: Optional[Tensor] = None) -> Tensor:
        """memory: (rows, m, dim) M^{t-1}; states: (rows, len, dim) H^t; padding: (rows, len)
        bool. Returns M^t (rows, m, dim)."""
        states = states.detach()  # SG(H)
        s, _ = self.attn(
            query=memory.transpose(0, 1),  # (m, rows, dim)
            key=states.transpose(0, 1),  # (len, rows, dim)
            value=states.transpose(0, 1),
            key_padding_mask=padding,  # (an all-False mask is an all-zero bias: no need to ask the device)
            need_weights=False,
        )
        s = s.transpose(0, 1)  # (rows, m, dim)
        update = torch.tanh(self.w_u1(memory) + self.w_u2(s))
        gate = torch.sigmoid(self.w_g1(memory) + self.w_g2(s))
        return gate * update + (1 - gate) * memory


class AttentiveMemory(nn.Module):
    """A learned initial memory M^0, the gated write, and the extra cross-attention that
    reads M^{t-1} after a layer's self-attention (with its residual and layer norm).

    The read's output projection starts at zero, so a layer with a fresh memory computes
    exactly what the BART layer it extends computed: fine-tuning starts from BART."""

    kind = "attentive"

    def __init__(self, embed_dim: int, heads: int, slots: int, dropout: float = 0.0, attention_dropout: float = 0.0):
        super().__init__()
        self.slots = slots
        self.initial = nn.Parameter(torch.empty(slots, embed_dim))
        nn.init.normal_(self.initial, mean=0.0, std=embed_dim ** -0.5)
        self.update = GatedMemoryUpdate(embed_dim, heads, attention_dropout)
        self.read_attn = FusedCrossAttention(embed_dim, heads, dropout=attention_dropout, encoder_decoder_attention=True)
        nn.init.zeros_(self.read_attn.out_proj.weight)
        nn.init.zeros_(self.read_attn.out_proj.bias)
        self.read_layer_norm = LayerNorm(embed_dim)
        self.dropout = nn.Dropout(dropout)

    def initial_slots(self, rows: int, like: Optional[Tensor] = None) -> MemorySlots:
        """M^0 for ``rows`` rows: the learned initial memory (``like`` is not needed)."""
        return MemorySlots.full(self.initial.unsqueeze(0).expand(rows, -1, -1))  # (rows, m, dim)

    def write(self, previous: MemorySlots, states: Tensor, padding: Tensor) -> MemorySlots:
        """M^t from M^{t-1} and the segment's states (Eq. 9-12)."""
        return MemorySlots.full(self.update(previous.values, states, padding))

    def read(self, x: Tensor, slots: MemorySlots, normalize_before: bool,
             incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None) -> Tensor:
        """x: (len, rows, dim) -> (len, rows, dim): x + Attn(x, M, M), normalized as the layer is."""
        residual = x
        if normalize_before:
            x = self.read_layer_norm(x)
        memory = slots.values.transpose(0, 1)  # (m, rows, dim)
        x, _ = self.read_attn(query=x, key=memory, value=memory, key_padding_mask=slots.key_padding_mask(),
                              incremental_state=incremental_state, static_kv=True, need_weights=False)
        x = residual + self.dropout(x)
        if not normalize_before:
            x = self.read_layer_norm(x)
        return x


# --------------------------------------------------------------------------- Eq. 1-6


class CompressiveMemory(nn.Module):
    """Compressive memory (Eq. 1-8, after the Compressive Transformer): the first half of the
    slots holds compressed history, the second half the most recent self-attention inputs;
    self-attention reads concat(M^{t-1}, H) as keys and values.

    A segment's states enter the recent half (Eq. 2); what they push out is compressed by a
    convolution of kernel and stride ``rate`` (Eq. 3) and enters the compressed half
    (Eq. 5), whose oldest entries fall out. Both halves hold their newest entries last; a
    half that is not yet full has its empty slots first. When the pushed-out part is not
    a multiple of ``rate``, its newest ``len % rate`` states are dropped."""

    kind = "compressive"

    def __init__(self, embed_dim: int, slots: int, rate: int = 5):
        super().__init__()
        if slots < 2 or slots % 2:
            raise ValueError(f"compressive memory needs an even number of slots, got {slots}")
        self.slots, self.rate = slots, rate
        self.compress = nn.Conv1d(embed_dim, embed_dim, kernel_size=rate, stride=rate)

    def initial_slots(self, rows: int, like: Tensor) -> MemorySlots:
        """M^0 for ``rows`` rows: every slot empty (``like``: the model's dtype and device)."""
        values = like.new_zeros(rows, self.slots, like.size(-1))
        return MemorySlots(values, torch.ones(rows, self.slots, dtype=torch.bool, device=like.device))

    def write(self, slots: MemorySlots, states: Tensor, padding: Tensor) -> MemorySlots:
        """M^t by Eq. 1-6, every row at once, without reading the device. slots: M^{t-1};
        states: (rows, len, dim) H^t_inp; padding: (rows, len).

        A row's entries are laid out right-aligned in fixed-size tensors (``_right_aligned``), so
        that rows holding different numbers of entries share one shape: the recent half and the
        segment's states, then what they push out, are each one tensor of ``len`` + m/2 or ``len``
        slots. ``tests/test_awesome_memory.py`` holds this to the equations applied row by row."""
        half, rate = self.slots // 2, self.rate
        length = states.size(1)
        states = states.detach()  # SG(H)
        recent, recent_empty = _right_aligned(torch.cat([slots.values[:, half:], states], 1),
                                              torch.cat([slots.empty[:, half:], padding], 1))  # M'_u (2)
        # (rows, half + len, dim): its last m/2 slots are M_u^t (4), the first len slots what it pushed out
        pushed, pushed_empty = recent[:, :length], recent_empty[:, :length]  # (rows, len, dim), entries last
        recent, recent_empty = recent[:, length:], recent_empty[:, length:]  # (rows, half, dim)
        # the oldest pushed entries, a multiple of rate, compressed rate at a time (3); the newest
        # (count % rate) are dropped: the others shifted right over them, so that windows of rate
        # ending at the last slot each hold rate entries or none
        dropped = (~pushed_empty).sum(1, keepdim=True) % rate  # (rows, 1)
        source = torch.arange(length, device=states.device) - dropped  # (rows, len): where each slot's entry was
        within = source.clamp(min=0)
        kept = (source >= 0) & ~pushed_empty.gather(1, within)
        pushed = _rows_gathered(pushed, within)
        front = -length % rate  # empty slots before the first window
        pushed = F.pad(pushed.masked_fill(~kept.unsqueeze(-1), 0), (0, 0, front, 0))  # (rows, windows * rate, dim)
        squeezed = self.compress(pushed.transpose(1, 2)).transpose(1, 2)  # (rows, windows, dim) M'_c (3)
        squeezed_empty = ~F.pad(kept, (front, 0))[:, rate - 1::rate]  # (rows, windows)
        compressed, compressed_empty = _right_aligned(torch.cat([slots.values[:, :half], squeezed], 1),
                                                      torch.cat([slots.empty[:, :half], squeezed_empty], 1))
        compressed, compressed_empty = compressed[:, -half:], compressed_empty[:, -half:]  # M_c^t (5)
        empty = torch.cat([compressed_empty, recent_empty], 1)  # (rows, m)
        values = torch.cat([compressed, recent], 1).masked_fill(empty.unsqueeze(-1), 0)  # M^t (6)
        return MemorySlots(values, empty)

    @staticmethod
    def keys(slots: MemorySlots, x: Tensor, padding: Optional[Tensor]) -> Tuple[Tensor, Optional[Tensor]]:
        """Eq. 7: the self-attention's keys and values concat(M^{t-1}, H) (m + len, rows, dim),
        and their (rows, m + len) padding mask."""
        keys = torch.cat([slots.values.transpose(0, 1).to(x), x])
        if padding is None:
            padding = slots.empty.new_zeros(x.size(1), x.size(0))
        return keys, torch.cat([slots.empty, padding], dim=1)


def _right_aligned(values: Tensor, empty: Tensor) -> Tuple[Tensor, Tensor]:
    """(rows, n, dim) values and (rows, n) empty flags -> the same with each row's entries
    last, in their order, and its empty slots first."""
    order = torch.sort((~empty).byte(), dim=1, stable=True).indices  # (rows, n): the empty slots, then the entries
    return _rows_gathered(values, order), empty.gather(1, order)


def _rows_gathered(values: Tensor, index: Tensor) -> Tensor:
    """(rows, n, dim) values, (rows, k) positions -> (rows, k, dim): each row's vectors at its
    positions, as one index_select of whole vectors (a gather of every element, and its
    backward, cost several times as much on the CPU)."""
    rows, n, dim = values.shape
    flat = index + torch.arange(rows, device=index.device).unsqueeze(1) * n  # (rows, k) into rows * n
    return values.reshape(rows * n, dim).index_select(0, flat.flatten()).view(rows, -1, dim)


def build_memory(kind: str, embed_dim: int, heads: int, slots: int, rate: int, dropout: float,
                 attention_dropout: float) -> nn.Module:
    if kind == "attentive":
        return AttentiveMemory(embed_dim, heads, slots, dropout, attention_dropout)
    if kind == "compressive":
        return CompressiveMemory(embed_dim, slots, rate)
    raise ValueError(f"unknown memory {kind!r}; choose from {', '.join(MEMORY_KINDS)}")


# --------------------------------------------------------------------------- layers


def feed_forward(layer, x: Tensor) -> Tensor:
    """fairseq's feed-forward sublayer of ``layer`` (an encoder or decoder layer), with its
    residual connection and layer norm, pre- or post-norm as the layer is: (len, rows, dim)."""
    residual = x
    if layer.normalize_before:
        x = layer.final_layer_norm(x)
    x = layer.activation_dropout_module(layer.activation_fn(layer.fc1(x)))
    x = layer.residual_connection(layer.dropout_module(layer.fc2(x)), residual)
    if not layer.normalize_before:
        x = layer.final_layer_norm(x)
    return x


class MemoryEncoderLayer(TransformerEncoderLayerBase):
    """A BART encoder layer with an external memory.

    attentive:   self-attention -> memory cross-attention -> FFN; writes H_self (Eq. 12);
    compressive: self-attention over concat(M, H) (Eq. 7-8) -> FFN; writes H_inp (Eq. 2).
    """

    def __init__(self, cfg, memory: nn.Module):
        super().__init__(cfg)
        self.memory = memory

    def forward(self, x: Tensor, encoder_padding_mask: Optional[Tensor], attn_mask: Optional[Tensor] = None,
                memory_slots: Optional[MemorySlots] = None) -> Tuple[Tensor, Tensor]:
        """x: (len, rows, dim); returns the layer output and the states the memory writes,
        both (len, rows, dim)."""
        if attn_mask is not None:
            attn_mask = attn_mask.masked_fill(attn_mask.to(torch.bool), -1e8 if x.dtype == torch.float32 else -1e4)
        compressive = self.memory.kind == "compressive"
        written = x  # H_inp
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        if compressive:
            keys, key_padding = CompressiveMemory.keys(memory_slots, x, encoder_padding_mask)
            if attn_mask is not None:
                attn_mask = torch.cat([attn_mask.new_zeros(attn_mask.size(0), self.memory.slots), attn_mask], dim=1)
        else:
            keys, key_padding = x, encoder_padding_mask
        x, _ = self.self_attn(query=x, key=keys, value=keys, key_padding_mask=key_padding, need_weights=False,
                              attn_mask=attn_mask)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        if not compressive:
            written = x  # H_self
            x = self.memory.read(x, memory_slots, self.normalize_before)

        x = feed_forward(self, x)
        return x, written


class MemoryDecoderLayer(FusedAttentionLayer, TransformerDecoderLayerBase):
    """A BART decoder layer with an external memory of the summaries of earlier segments.

    attentive:   self-attention -> memory cross-attention -> encoder attention -> FFN;
    compressive: self-attention over concat(M, H) -> encoder attention -> FFN. During
                 incremental decoding the memory's keys and values are placed in the
                 self-attention's cache before the first step, so that every step's keys
                 are concat(M, summary so far), reordered with the beams like the rest.
    """

    def __init__(self, cfg, memory: nn.Module, no_encoder_attn: bool = False):
        super().__init__(cfg, no_encoder_attn=no_encoder_attn)
        if self.cross_self_attention or self.c_attn is not None or self.attn_ln is not None or \
                self.ffn_layernorm is not None or self.w_resid is not None:
            raise ValueError("memory decoder layers support BART's layer options only")
        self.memory = memory

    def forward(
        self,
        x: Tensor,
        encoder_out: Optional[Tensor] = None,
        encoder_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        self_attn_mask: Optional[Tensor] = None,
        self_attn_padding_mask: Optional[Tensor] = None,
        need_attn: bool = False,
        need_head_weights: bool = False,
        memory_slots: Optional[MemorySlots] = None,
    ):
        """x: (tgt_len, rows, dim). Returns the output (tgt_len, rows, dim), the encoder
        attention (or None) and the states the memory writes (tgt_len, rows, dim)."""
        if need_head_weights:
            need_attn = True
        compressive = self.memory.kind == "compressive"
        written = x  # H_inp
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        if compressive and incremental_state is not None:
            self._cache_memory_keys(memory_slots, incremental_state)
            keys, key_padding = x, self_attn_padding_mask
        elif compressive:
            keys, key_padding = CompressiveMemory.keys(memory_slots, x, self_attn_padding_mask)
            if self_attn_mask is not None:  # (tgt, tgt) causal -> (tgt, m + tgt) bool, like the padding mask
                causal = self_attn_mask != 0  # True where a position may not be attended
                self_attn_mask = torch.cat([causal.new_zeros(x.size(0), self.memory.slots), causal], dim=1)
        else:
            keys, key_padding = x, self_attn_padding_mask
        x, _ = self.self_attn(query=x, key=keys, value=keys, key_padding_mask=key_padding,
                              incremental_state=incremental_state, need_weights=False, attn_mask=self_attn_mask)
        x = self.residual_connection(self.dropout_module(x), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)
        if not compressive:
            written = x  # H_self
            x = self.memory.read(x, memory_slots, self.normalize_before, incremental_state)

        attn = None
        if self.encoder_attn is not None and encoder_out is not None:
            residual = x
            if self.normalize_before:
                x = self.encoder_attn_layer_norm(x)
            x, attn = self.encoder_attn(
                query=x, key=encoder_out, value=encoder_out, key_padding_mask=encoder_padding_mask,
                incremental_state=incremental_state, static_kv=True,
                need_weights=need_attn or (not self.training and self.need_attn), need_head_weights=need_head_weights,
            )
            x = self.residual_connection(self.dropout_module(x), residual)
            if not self.normalize_before:
                x = self.encoder_attn_layer_norm(x)

        x = feed_forward(self, x)
        return x, attn, written

    def _cache_memory_keys(self, slots: MemorySlots, incremental_state) -> None:
        """Before the first decoding step, put the memory's keys and values where the
        self-attention keeps those of earlier steps: (rows, heads, m, head_dim)."""
        if "prev_key" in (self.self_attn._get_input_buffer(incremental_state) or {}):
            return
        attn = self.self_attn
        rows, m, _ = slots.values.shape
        memory = slots.values.transpose(0, 1)  # (m, rows, dim)

        def heads(projected: Tensor) -> Tensor:  # (m, rows, dim) -> (rows, heads, m, head_dim)
            return projected.contiguous().view(m, rows, attn.num_heads, attn.head_dim).permute(1, 2, 0, 3)

        attn._set_input_buffer(incremental_state, {
            "prev_key": heads(attn.k_proj(memory)),
            "prev_value": heads(attn.v_proj(memory)),
            "prev_key_padding_mask": slots.empty,
        })
