"""HED (Shen et al., 2023): BART with hierarchical encoding and decoding for
multi-document summarization, without new parameters.

Data layout. ``src_tokens`` is (batch, max_docs, doc_len), as the ``documents`` view
makes it (``--view documents --max-source-tokens 4096``): every source document of a
cluster is ``<s> doc </s>``, cut to an equal share of the 4,096 tokens (PRIMERA's
truncation, which the paper follows), then all-padding documents up to ``max_docs``.
Each document keeps its closing ``</s>``: every document is then exactly the input BART
was pre-trained on, and a cluster of one document is plain BART on ``<s> doc </s>``. Its
``<s>`` is the document's start-of-document (SOD) token.

Encoder (Section 4.1). Positions restart at 0 in every document; a document longer than
1,024 tokens uses positions past BART's table, which HED extends to 4,096 by tiling
BART's 1,024 rows (Section 5.3; done when a BART checkpoint is loaded). Self-attention
stays within each document, except that SOD tokens also attend to each other
(``systems/hed/attention.py``). The encoder works on the documents' tokens packed
without padding and returns each cluster's documents concatenated: states
(src_len, batch, dim), and in place of the padding mask the document map (batch,
src_len) that the decoder's cross-attention needs (-1 on padding). A training pass
captured as CUDA graphs (``static_host_facts``) lays out every document slot whole
instead, padding included, so that it reads nothing back from the device.

Decoder (Section 4.2). BART's decoder, whose cross-attention in every head of every
layer normalises within each document (Eq. 3) and scales documents by the softmax of
their SOD scores (Eq. 4-5). Its attention output (``extra["attn"]``) and
``extra["page_weights"]`` are the documents' weights s of the last layer, averaged over
heads: (batch, tgt_len, max_docs) and (batch, max_docs, tgt_len); the generator and the
criterion read them as page weights.

Beam search. BART's ``set_beam_size`` is kept: the encoder output stays one row per
cluster, and the beams of a cluster share each layer's cached keys, values and document
layout. With the encoder output repeated per beam (fairseq's default) the cache simply
holds one copy per beam and is reordered with them.
"""

import contextlib
import logging
from typing import Dict, Iterator, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from fairseq.models import register_model, register_model_architecture
from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture
from fairseq.models.transformer import TransformerConfig, TransformerDecoder, TransformerEncoder
from fairseq.modules import LearnedPositionalEmbedding
from fairseq.modules.transformer_layer import TransformerDecoderLayer, TransformerEncoderLayer

from ..bart.arguments import bart_dimensions
from ..bart.model import LongInputBARTModel, SyncFreeDecoder, wrap_layer
from ...modules.fused_layer import FusedAttentionLayer
from ...errors import SettingError
from ...modules.output_projection import FewRowProjection
from .attention import (DocumentLayout, DocumentSelfAttention, EverySlotLayout, HierarchicalCrossAttention,
                        document_shapes)

logger = logging.getLogger(__name__)

HED_SOURCE_POSITIONS = 4096  # Section 5.3: 4,096 source tokens, BART's 1,024 positions tiled
# [document map, its DocumentShapes]: what the encoder's layout knows without asking the device, so that
# a decoder reading this very map need not ask it; only the encoder's own output has it (fairseq's
# reorder_encoder_out keeps its own keys)
DOCUMENT_SHAPES = "document_shapes"
POSITIONS_KEY = "encoder.embed_positions.weight"


class HEDEncoderLayer(TransformerEncoderLayer):
    """BART's encoder layer with document-restricted self-attention. fairseq's forward is
    kept: x is (n_tokens, 1, dim) and the DocumentLayout travels as its padding mask."""

    def build_self_attention(self, embed_dim, args):
        cfg = TransformerConfig.from_namespace(args)
        return DocumentSelfAttention(
            embed_dim,
            cfg.encoder.attention_heads,
            dropout=cfg.attention_dropout,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )


class HEDDecoderLayer(FusedAttentionLayer, TransformerDecoderLayer):
    """BART's decoder layer whose cross-attention is hierarchical (Eq. 3-5)."""

    def build_encoder_attention(self, embed_dim, args):
        cfg = TransformerConfig.from_namespace(args)
        return HierarchicalCrossAttention(
            embed_dim,
            cfg.decoder.attention_heads,
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout,
            encoder_decoder_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )


class HEDEncoder(TransformerEncoder):
    """BART's encoder reading each cluster as documents with boundaries (Section 4.1)."""

    def __init__(self, args, dictionary, embed_tokens):
        super().__init__(args, dictionary, embed_tokens)
        if self.embed_positions is not None and not isinstance(self.embed_positions, LearnedPositionalEmbedding):
            raise SettingError("HED restarts BART's learned positions in every document; use learned positions")

    def build_encoder_layer(self, args):
        return wrap_layer(HEDEncoderLayer(args), args)

    def embed_documents(self, layout: DocumentLayout) -> Tensor:
        """Token plus position embeddings of the packed tokens, positions restarting in
        every document: (n_tokens, dim), as BART embeds each document alone."""
        x = self.embed_scale * self.embed_tokens(layout.tokens)  # (n_tokens, dim)
        if self.embed_positions is not None:
            if layout.longest > self.max_positions():
                raise SettingError(f"a document of {layout.longest} tokens is longer than the {self.max_positions()} "
                                   "encoder positions; cut the cluster shorter (--max-source-tokens)")
            # fairseq's learned positions start after the padding index
            x = x + F.embedding(layout.positions + self.padding_idx + 1, self.embed_positions.weight)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout_module(x)
        if self.quant_noise is not None:
            x = self.quant_noise(x)
        return x

    def static_host_facts(self, src_tokens: Tensor) -> bool:
        """What a pass over any batch of the shape of ``src_tokens`` takes in place of the documents'
        lengths, which it would read back: that every document slot is laid out whole
        (``EverySlotLayout``)."""
        return True

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, host_facts: Optional[bool] = None):
        # src_tokens: (batch, max_docs, doc_len); (batch, src_len) is a cluster of one document
        # host_facts: ``static_host_facts``, for a pass that reads nothing back; None: the packed layout
        if src_tokens.dim() == 2:
            src_tokens = src_tokens.unsqueeze(1)
        if src_tokens.dim() != 3:
            raise ValueError(f"HED expects src_tokens of shape (batch, docs, doc_len), got {tuple(src_tokens.shape)}")
        if token_embeddings is not None:
            raise NotImplementedError("HED embeds its documents itself")
        layout = (EverySlotLayout if host_facts else DocumentLayout)(src_tokens, self.padding_idx)

        x = self.embed_documents(layout).unsqueeze(1)  # (n_tokens, 1, dim): one packed row
        states = [x] if return_all_hiddens else []
        for layer in self.layers:
            x = layer(x, encoder_padding_mask=layout)
            if return_all_hiddens:
                states.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)

        def to_clusters(packed: Tensor) -> Tensor:  # (n_tokens, 1, dim) -> (src_len, batch, dim)
            return layout.to_clusters(packed.squeeze(1)).transpose(0, 1)

        document_map = layout.document_map()  # (batch, src_len): document index, -1 = padding
        return {
            "encoder_out": [to_clusters(x)],  # (src_len, batch, dim)
            "encoder_padding_mask": [document_map],
            "encoder_embedding": [],
            "encoder_states": [to_clusters(s) for s in states],  # List[(src_len, batch, dim)]
            "src_tokens": [],
            "src_lengths": [layout.cluster_tokens.unsqueeze(1)],  # (batch, 1)
            DOCUMENT_SHAPES: [document_map, layout.shapes()],
        }


class HEDDecoder(FewRowProjection, SyncFreeDecoder, TransformerDecoder):
    """BART's decoder with hierarchical cross-attention; reports the documents' weights."""

    def build_decoder_layer(self, args, no_encoder_attn=False):
        return wrap_layer(HEDDecoderLayer(args, no_encoder_attn), args)

    def forward(self, prev_output_tokens: Tensor, encoder_out: Optional[Dict[str, List[Tensor]]] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None, **kwargs):
        """fairseq's decoder; the documents' weights (Eq. 4) also come back as "page_weights"."""
        with self._shared_document_shapes(encoder_out, incremental_state):
            x, extra = super().forward(prev_output_tokens, encoder_out, incremental_state, **kwargs)
        document_weights = extra["attn"][0]  # (rows, tgt_len, max_docs), last layer, mean over heads
        extra["page_weights"] = None if document_weights is None else document_weights.transpose(1, 2)
        return x, extra

    @contextlib.contextmanager
    def _shared_document_shapes(self, encoder_out, incremental_state) -> Iterator[None]:
        """While the layers run, every cross-attention that lays out its keys in this call (a full
        pass, or a search's first step) finds the documents' shapes: the encoder's, where its
        output is the encoder's own, else read back once for all."""
        attentions = [layer.encoder_attn for layer in self.layers
                      if isinstance(getattr(layer, "encoder_attn", None), HierarchicalCrossAttention)]
        maps = (encoder_out or {}).get("encoder_padding_mask") or []  # [(batch, src_len)] the document map
        laying_out = len(attentions) > 0 and len(maps) > 0 and (  # (torch 2.11's compiler takes no bool(list))
            incremental_state is None or "document_map" not in attentions[0]._get_input_buffer(incremental_state))
        known = None
        if laying_out:
            encoders = encoder_out.get(DOCUMENT_SHAPES)  # [document map, its DocumentShapes]
            known = (maps[0], encoders[1] if encoders and encoders[0] is maps[0] else document_shapes(maps[0]))
        for attention in attentions:
            attention.known_shapes = known
        try:
            yield
        finally:
            for attention in attentions:
                attention.known_shapes = None


def tile_positions(table: Tensor, rows: int, offset: int) -> Tensor:
    """A learned position table extended to ``rows`` rows by repeating its positions
    (the first ``offset`` rows are fairseq's padding offset and stay as they are)."""
    tiled = table.new_empty((rows, table.size(1)))
    tiled[:offset] = table[:offset]
    positions = torch.arange(rows - offset) % (table.size(0) - offset) + offset
    tiled[offset:] = table[positions]
    return tiled


@register_model("hed")
class HEDModel(LongInputBARTModel):
    """BART with HED's hierarchical encoder self-attention and decoder cross-attention; its
    input is (batch, max_docs, doc_len), one row per document of a cluster."""

    encoder_class = HEDEncoder
    decoder_class = HEDDecoder
    # the generator's contract (generation/contract.py): the documents' weights (Eq. 4) come
    # back in fairseq's "attn" slot; documents meet in every encoder layer, so none can be dropped
    mixes_pages = True
    prunes_pages = False

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        key = (name + "." if name != "" else "") + POSITIONS_KEY
        table = self.encoder.embed_positions.weight if self.encoder.embed_positions is not None else None
        if table is not None and key in state_dict and state_dict[key].size(0) < table.size(0):
            # BART's 1,024 positions, repeated up to HED's 4,096 (Section 5.3)
            logger.info(f"tiling {state_dict[key].size(0)} encoder position rows to {table.size(0)}")
            state_dict[key] = tile_positions(state_dict[key], table.size(0), self.encoder.padding_idx + 1)
        # Anything else missing or unexpected is left for strict loading to report by name.


def _hed_defaults(args):
    args.max_source_positions = getattr(args, "max_source_positions", HED_SOURCE_POSITIONS)


@register_model_architecture("hed", "hed_bart_large")
def hed_bart_large(args):
    _hed_defaults(args)
    bart_dimensions(args, "bart_large")
    bart_large_architecture(args)


@register_model_architecture("hed", "hed_bart_base")
def hed_bart_base(args):
    _hed_defaults(args)
    bart_dimensions(args, "bart_base")
    bart_base_architecture(args)


@register_model_architecture("hed", "hed_tiny")
def hed_tiny(args):
    """pagesum_tiny's dimensions: small enough for tests and CPU demos."""
    bart_dimensions(args, "tiny")
    hed_bart_base(args)
