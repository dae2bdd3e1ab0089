"""AWESOME (Cao and Wang): a BART that summarizes a long document segment by segment,
carrying external memories of the segments and summaries read so far.

One forward pass is one segment of every document of a batch: ``src_tokens`` is
(rows, seg_len) (or (rows, 1, seg_len), one page per row as the page generator lays
it out) and ``prev_output_tokens`` (rows, tgt_len) is that segment's summary, shifted.
The document's summary is the concatenation of its segments' summaries.

Memories (``--memory``, Sec. 3.1, see ``systems/awesome/memory.py``):

* ``attentive`` (default): in the last 3 encoder and decoder layers an extra
  cross-attention after self-attention reads ``m`` memory slots, which a gated write
  (Eq. 9-12) updates after each segment;
* ``compressive``: in the first 3 layers self-attention reads concat(memory, input),
  half the slots holding history compressed with ratio ``--compression-rate`` (Eq. 1-8);
* ``none``: plain BART, segment by segment (Se3).

The encoder memory reads the document's earlier segments; the decoder memory the
summaries of those segments (the references in training, the generated summaries in
decoding). ``forward(..., memory=SegmentMemory())`` reads the memory that the previous
call left and leaves this segment's write pending in it; see ``systems/awesome/memory.py``
for why writes are lazy and where the gradients stop. ``--memory-grad-segments K``: the
loss of a segment back-propagates through the memory writes of the K segments before it
(truncated back-propagation through the memory; 0: through every earlier write).
"""

import logging
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from fairseq.models import register_model, register_model_architecture
from fairseq.models.bart import BARTModel
from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoder, TransformerEncoder

from ...architectures import AWESOME_SLOTS
from ...errors import SettingError
from ..bart.arguments import as_bart_args, bart_dimensions
from ..bart.model import LongInputBARTModel, SyncFreeEncoder, TokenWeightsOnRequest, wrap_layer
from ...modules.decoder_self_attention import set_cache_beams
from ...modules.fused_layer import FusedDecoderLayer, as_config
from ...modules.output_projection import FewRowProjection
from ...modules.layer_norm import recomputing_norms
from .memory import (
    MEMORY_KINDS,
    MemoryDecoderLayer,
    MemoryEncoderLayer,
    MemorySlots,
    SegmentMemory,
    SegmentStates,
    advance,
    build_memory,
    replay,
    write_seed,
)

logger = logging.getLogger(__name__)

MEMORY_SIDES = ("both", "encoder", "decoder")
MEMORY_DEPTH = 3  # layers that hold a memory by default (Sec. 3.1, "selective installation")
# Truncated back-propagation through the memory: a segment's loss reaches the writes of the
# 1 segment before it (Sec. 3.1: SG on the segment states only; constant memory in the
# number of segments, App. C.2). See systems/awesome/memory.py.
MEMORY_GRAD_SEGMENTS = 1


def memory_layer_ids(args, side: str, num_layers: int) -> Tuple[int, ...]:
    """0-based layers of ``side`` ("encoder" or "decoder") that hold a memory."""
    kind = getattr(args, "memory", "attentive")
    if kind == "none" or getattr(args, "memory_in", "both") not in ("both", side):
        return ()
    if getattr(args, "memory_layers", None):
        ids = tuple(sorted({int(i) for i in str(args.memory_layers).split(",") if i.strip()}))
        if any(i < 0 or i >= num_layers for i in ids):
            raise SettingError(f"--memory-layers {args.memory_layers}: the {side} has layers 0..{num_layers - 1}")
        return ids
    depth = min(MEMORY_DEPTH, num_layers)
    if kind == "compressive":  # the first layers (Sec. 3.1)
        return tuple(range(depth))
    return tuple(range(num_layers - depth, num_layers))  # attentive: the last layers


def _new_memory(args, embed_dim: int, heads: int):
    return build_memory(args.memory, embed_dim, heads, args.memory_slots, args.compression_rate,
                        args.dropout, args.attention_dropout)


class AwesomeEncoder(TransformerEncoder):
    """BART's encoder over one segment per row, with memories in some layers."""

    def __init__(self, args, dictionary, embed_tokens):
        # build_encoder_layer runs inside the parent's __init__ and needs these
        self.memory_layer_ids = memory_layer_ids(args, "encoder", args.encoder_layers)
        self._layers_built = 0
        super().__init__(args, dictionary, embed_tokens)

    def build_encoder_layer(self, args):
        index, self._layers_built = self._layers_built, self._layers_built + 1
        if index not in self.memory_layer_ids:
            return super().build_encoder_layer(args)
        return MemoryEncoderLayer(
            TransformerConfig.from_namespace(args),
            _new_memory(args, args.encoder_embed_dim, args.encoder_attention_heads),
        )

    @property
    def memories(self) -> list:
        return [layer.memory for layer in self.layers if isinstance(layer, MemoryEncoderLayer)]

    static_host_facts = SyncFreeEncoder.static_host_facts  # the flat encoders' one fact: the segment holds padding

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, encoder_memory: Optional[List[MemorySlots]] = None,
                decoder_memory: Optional[List[MemorySlots]] = None, host_facts: Optional[Tuple[bool]] = None):
        """src_tokens: (rows, seg_len) or (rows, 1, seg_len). ``encoder_memory``: the slots
        every memory layer reads (default: the initial memory); ``decoder_memory`` is passed
        on to the decoder in the output, where beam search reorders it with the rows.
        ``host_facts`` (``static_host_facts``): given, the pass reads nothing back."""
        if src_tokens.dim() == 3:
            if src_tokens.size(1) != 1:
                raise ValueError(f"AWESOME reads one segment per row, got src_tokens {tuple(src_tokens.shape)}")
            src_tokens = src_tokens[:, 0]
            src_tokens = src_tokens[:, : int(src_tokens.ne(self.padding_idx).sum(1).max())]
        rows = src_tokens.size(0)
        memories = self.memories
        if encoder_memory is None:
            encoder_memory = [m.initial_slots(rows, self.embed_tokens.weight) for m in memories]

        padding = src_tokens.eq(self.padding_idx)  # (rows, seg_len)
        has_pads = bool(padding.any()) if host_facts is None else host_facts[0]  # read back once, not at every layer
        x, embedding = self.forward_embedding(src_tokens, token_embeddings)
        if has_pads:
            x = x * (1 - padding.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)  # (seg_len, rows, dim)

        states = [x] if return_all_hiddens else []
        written = []  # per memory layer: (seg_len, rows, dim)
        slots = iter(encoder_memory)
        for layer in self.layers:
            if isinstance(layer, MemoryEncoderLayer):
                x, states_to_write = layer(x, padding if has_pads else None, memory_slots=next(slots))
                written.append(states_to_write)
            else:
                x = layer(x, encoder_padding_mask=padding if has_pads else None)
            if return_all_hiddens:
                states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)

        decoder_memory = decoder_memory or []
        return {
            "encoder_out": [x],  # (seg_len, rows, dim)
            "encoder_padding_mask": [padding],  # (rows, seg_len)
            "encoder_embedding": [embedding],  # (rows, seg_len, dim)
            "encoder_states": states,
            "fc_results": [],
            "src_tokens": [],
            "src_lengths": [src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1)],
            "memory_states": written,
            "decoder_memory": [s.values for s in decoder_memory],  # each (rows, m, dim)
            "decoder_memory_empty": [s.empty for s in decoder_memory],  # each (rows, m)
            "decoder_memory_filled": [s.filled for s in decoder_memory],  # each known on the host: no slot empty
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        reordered["memory_states"] = []  # only the segment's own forward pass writes them
        for key in ("decoder_memory", "decoder_memory_empty"):
            reordered[key] = [t.index_select(0, new_order) for t in encoder_out.get(key, [])]
        reordered["decoder_memory_filled"] = encoder_out.get("decoder_memory_filled", [])  # per layer, not per row
        return reordered


class AwesomeDecoder(FewRowProjection, TokenWeightsOnRequest, TransformerDecoder):
    """BART's decoder with memories of earlier segments' summaries in some layers; a decoding
    step computes no token weights that nobody reads."""

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        self.memory_layer_ids = memory_layer_ids(args, "decoder", args.decoder_layers)
        self._layers_built = 0
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn, output_projection)

    def build_decoder_layer(self, args, no_encoder_attn=False):
        index, self._layers_built = self._layers_built, self._layers_built + 1
        if index not in self.memory_layer_ids:
            return wrap_layer(FusedDecoderLayer(as_config(args), no_encoder_attn), args)
        return MemoryDecoderLayer(
            TransformerConfig.from_namespace(args),
            _new_memory(args, args.decoder_embed_dim, args.decoder_attention_heads),
            no_encoder_attn=no_encoder_attn,
        )

    @property
    def memories(self) -> list:
        return [layer.memory for layer in self.layers if isinstance(layer, MemoryDecoderLayer)]

    def extract_features_scriptable(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]],
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        """fairseq's decoder pass, with every memory layer given its slots. Returns the
        features (rows, tgt_len, dim) and, besides fairseq's "attn" and "inner_states",
        "memory_states": per memory layer the states it writes, (tgt_len, rows, dim)."""
        rows = prev_output_tokens.size(0)
        if alignment_layer is None:
            alignment_layer = self.num_layers - 1
        enc = encoder_out["encoder_out"][0] if encoder_out and encoder_out["encoder_out"] else None
        padding_mask = encoder_out["encoder_padding_mask"][0] if encoder_out and encoder_out["encoder_padding_mask"] else None
        memory_slots = self._memory_slots(encoder_out, rows)

        positions = None
        if self.embed_positions is not None:
            positions = self.embed_positions(prev_output_tokens, incremental_state=incremental_state)
        if incremental_state is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            if positions is not None:
                positions = positions[:, -1:]
        prev_output_tokens = prev_output_tokens.contiguous()
        x = self.embed_scale * self.embed_tokens(prev_output_tokens)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        if self.project_in_dim is not None:
            x = self.project_in_dim(x)
        if positions is not None:
            x += positions
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        x = x.transpose(0, 1)  # (tgt_len, rows, dim)

        # always passed on, so that no pass waits for the device to say whether there is any padding:
        # a decoding step's self-attention keeps it with its cache, a full pass's causal self-attention
        # needs none, and a compressive layer's reads it with the memory's (as SyncFreeDecoder)
        self_attn_padding_mask = prev_output_tokens.eq(self.padding_idx)  # (rows, tgt_len)

        attn: Optional[Tensor] = None
        inner_states: List[Optional[Tensor]] = [x]
        written: List[Tensor] = []
        slots = iter(memory_slots)
        for idx, layer in enumerate(self.layers):
            self_attn_mask = self.buffered_future_mask(x) if incremental_state is None and not full_context_alignment else None
            needs_attn = bool(idx == alignment_layer)
            if isinstance(layer, MemoryDecoderLayer):
                x, layer_attn, states_to_write = layer(
                    x, enc, padding_mask, incremental_state, self_attn_mask=self_attn_mask,
                    self_attn_padding_mask=self_attn_padding_mask, need_attn=needs_attn,
                    need_head_weights=needs_attn, memory_slots=next(slots),
                )
                written.append(states_to_write)
            else:
                x, layer_attn, _ = layer(
                    x, enc, padding_mask, incremental_state, self_attn_mask=self_attn_mask,
                    self_attn_padding_mask=self_attn_padding_mask, need_attn=needs_attn,
                    need_head_weights=needs_attn,
                )
            inner_states.append(x)
            if layer_attn is not None and idx == alignment_layer:
                attn = layer_attn.float().to(x)
        if attn is not None:
            if alignment_heads is not None:
                attn = attn[:alignment_heads]
            attn = attn.mean(dim=0)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        x = x.transpose(0, 1)  # (rows, tgt_len, dim)
        if self.project_out_dim is not None:
            x = self.project_out_dim(x)
        return x, {"attn": [attn], "inner_states": inner_states, "memory_states": written}

    def _memory_slots(self, encoder_out, rows: int) -> List[MemorySlots]:
        """The slots the encoder passed on (reordered with the beams), or the initial memory."""
        values = (encoder_out or {}).get("decoder_memory", [])
        if values:
            filled = encoder_out.get("decoder_memory_filled") or [False] * len(values)
            return [MemorySlots(v, e, full) for v, e, full in zip(values, encoder_out["decoder_memory_empty"], filled)]
        return [m.initial_slots(rows, self.embed_tokens.weight) for m in self.memories]


@register_model("awesome")
class AwesomeModel(LongInputBARTModel):
    """BART, segment by segment, with encoder and decoder memories (see the module docstring);
    its input is one segment per row, (rows, seg_len)."""

    encoder_class = AwesomeEncoder
    decoder_class = AwesomeDecoder
    # the generator's contract (generation/contract.py): one segment per row, no pages
    mixes_pages = False
    prunes_pages = False

    @staticmethod
    def add_args(parser):
        BARTModel.add_args(parser)
        parser.add_argument("--memory", choices=MEMORY_KINDS,
                            help="external memory: attentive (Eq. 9-12), compressive (Eq. 1-8) or none")
        parser.add_argument("--memory-slots", type=int, metavar="M", help="memory slots per layer (m)")
        parser.add_argument("--memory-layers", type=str, metavar="I,J,..",
                            help="0-based layers that hold a memory (default: the last 3 for attentive, "
                            "the first 3 for compressive memory)")
        parser.add_argument("--memory-in", choices=MEMORY_SIDES,
                            help="memories in the encoder, the decoder or both (Table 10 ablations)")
        parser.add_argument("--compression-rate", type=int, metavar="R", help="compressive memory's ratio r")
        parser.add_argument("--memory-grad-segments", type=int, metavar="K",
                            help="a segment's loss back-propagates through the memory writes of the K segments "
                            f"before it, and into the initial memory from the first K + 1 segments (0: every "
                            f"earlier segment; memory then grows with the document) (default: {MEMORY_GRAD_SEGMENTS})")

    @classmethod
    def build_model(cls, args, task):
        args = as_bart_args(args)  # a Namespace carries the memory options to the layers
        _awesome_defaults(args, slots=args.encoder_embed_dim)  # m = d, as in the paper, if no architecture set it
        if args.memory_grad_segments < 0:
            raise SettingError("--memory-grad-segments must be 0 (every segment) or more, "
                               f"got {args.memory_grad_segments}")
        model = super().build_model(args, task)
        model.memory_grad_segments = args.memory_grad_segments
        return model

    def training_capture_refusal(self) -> Optional[str]:
        """Why a segment's training pass cannot be captured (``systems/awesome/captured_segments.py``),
        or None: only a window of one write gives every segment after the second a pass of one
        structure and shape."""
        if self.memory_grad_segments != 1:
            return (f"--memory-grad-segments {self.memory_grad_segments}: a segment's window of writes grows with "
                    "its place in the document, each write replayed with a seed of its own; 1 (the default) is "
                    "captured")
        return super().training_capture_refusal()

    def read_memory(self, memory: Optional[SegmentMemory], rows: int) -> Tuple[List[MemorySlots], List[MemorySlots]]:
        """The slots every memory layer reads for this segment: the pending writes applied
        (in the current graph), or the initial memories before the first segment."""
        encoder_chains, decoder_chains = self.memory_windows(memory, rows)
        return [chain[-1] for chain in encoder_chains], [chain[-1] for chain in decoder_chains]

    def memory_windows(self, memory: Optional[SegmentMemory], rows: int):
        """Per memory layer (encoder, then decoder), the window ``modules.memory.replay`` computes."""
        like = self.encoder.embed_tokens.weight
        started = memory is not None and memory.started

        def windows(memories, pending) -> list:
            return [replay(m, pending[i] if started else None, rows, like) for i, m in enumerate(memories)]

        return (windows(self.encoder.memories, memory.encoder if started else None),
                windows(self.decoder.memories, memory.decoder if started else None))

    @recomputing_norms
    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor],
        prev_output_tokens: Tensor,
        memory: Optional[SegmentMemory] = None,
        features_only: bool = False,
        return_all_hiddens: bool = False,
        host_facts: Optional[Tuple[bool]] = None,
        **unused,
    ):
        """One segment per row: src_tokens (rows, seg_len), prev_output_tokens (rows, tgt_len).
        With ``memory``, reads what it holds and leaves this segment's write in it. With
        ``host_facts`` (``encoder.static_host_facts``), the pass reads nothing back."""
        rows = src_tokens.size(0)
        encoder_chains, decoder_chains = self.memory_windows(memory, rows)
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens,
                                   encoder_memory=[c[-1] for c in encoder_chains],
                                   decoder_memory=[c[-1] for c in decoder_chains], host_facts=host_facts)
        x, extra = self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only)
        if memory is not None:
            self._leave_writes(memory, encoder_chains, encoder_out["memory_states"],
                               encoder_out["encoder_padding_mask"][0], side="encoder")
            self._leave_writes(memory, decoder_chains, extra["memory_states"],
                               prev_output_tokens.eq(self.decoder.padding_idx), side="decoder")
        return x, extra

    def _leave_writes(self, memory: SegmentMemory, chains, states: List[Tensor], padding: Tensor, side: str) -> None:
        """This segment's writes, pending in ``memory`` with the window they extend. Without
        gradients (decoding, validation) a window of one write computes the same slots."""
        window = self.memory_grad_segments if torch.is_grad_enabled() else 1
        replayable = window != 1 and self.training  # a write that may run again must draw the same dropout
        pending = getattr(memory, side) if memory.started else None
        writes = []
        for i, (chain, written) in enumerate(zip(chains, states)):  # written: (len, rows, dim)
            seed = write_seed() if replayable else None
            segment = SegmentStates(written.transpose(0, 1).detach(), padding, seed)
            writes.append(advance(pending[i] if pending else None, chain, segment, window))
        setattr(memory, side, writes)

    def set_beam_size(self, beam):
        """BART's beamable-attention shortcut makes encoder reordering a no-op; the decoder
        memory travels with the encoder output and must be reordered, so keep it off. The
        decoder self-attention's cache still reorders within each example's beams."""
        set_cache_beams(self.decoder, beam)

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        prefix = name + "." if name != "" else ""
        fresh = self.state_dict()
        missing = [k for k in fresh if ".memory." in k and prefix + k not in state_dict]
        if missing and len(missing) == sum(".memory." in k for k in fresh):
            # A plain BART checkpoint: the memories are the only new modules.
            logger.info(f"initializing {len(missing)} memory parameters fresh (not in the checkpoint)")
            for key in missing:
                state_dict[prefix + key] = fresh[key].clone()
        # Anything else missing or unexpected is left for strict loading to report by name.


def _awesome_defaults(args, slots: int):
    args.memory = getattr(args, "memory", "attentive")
    args.memory_slots = getattr(args, "memory_slots", None) or slots
    args.memory_layers = getattr(args, "memory_layers", None)
    args.memory_in = getattr(args, "memory_in", "both")
    args.compression_rate = getattr(args, "compression_rate", None) or 5
    if getattr(args, "memory_grad_segments", None) is None:
        args.memory_grad_segments = MEMORY_GRAD_SEGMENTS


@register_model_architecture("awesome", "awesome_bart_large")
def awesome_bart_large(args):
    _awesome_defaults(args, slots=AWESOME_SLOTS["bart_large"])
    bart_dimensions(args, "bart_large")
    bart_large_architecture(args)


@register_model_architecture("awesome", "awesome_bart_base")
def awesome_bart_base(args):
    _awesome_defaults(args, slots=AWESOME_SLOTS["bart_base"])
    bart_dimensions(args, "bart_base")
    bart_base_architecture(args)


@register_model_architecture("awesome", "awesome_tiny")
def awesome_tiny(args):
    """pagesum_tiny's dimensions, with 8 memory slots: for tests and CPU demos."""
    bart_dimensions(args, "tiny")
    _awesome_defaults(args, slots=AWESOME_SLOTS["tiny"])
    bart_base_architecture(args)
