"""What every long-input model of this plugin (PageSum, HED, HEPOS, AWESOME) shares: BART,
built from ``as_bart_args``, with its encoder and decoder classes swapped.

A model names its two classes; fairseq's ``build_encoder`` / ``build_decoder`` hooks build
them with BART's arguments, and ``forward`` runs them as BART does. The encoder's input is
the view the model reads (pages, documents, one flat sequence, a segment per row): only the
encoder knows its layout. Every layer's feed-forward recomputes its activation in backward
(``modules/feed_forward.fold_activation``), every layer norm its output
(``modules/layer_norm.recompute_layer_norms``, while ``forward`` runs), and every dropout keeps
a bool mask (``modules/dropout.keep_bool_masks``), and the decoder's learned positions can take a step's
position as a tensor (``modules/decoding_step.py``). Layers a model builds itself go through ``wrap_layer``, as
fairseq's own do. Their decoder layers take ``modules/fused_layer.FusedAttentionLayer``, and
their decoders ``SyncFreeDecoder`` (and, where nothing reads the attention weights of a
decoding step, ``TokenWeightsOnRequest``).
"""

import argparse
from typing import Optional, Tuple

import torch
from fairseq.distributed import fsdp_wrap
from fairseq.models.bart import BARTModel
from fairseq.models.transformer import TransformerConfig
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from torch import Tensor, nn

from .arguments import as_bart_args
from ...modules.decoder_self_attention import set_cache_beams
from ...modules.decoding_step import embed_step_positions
from ...modules.dropout import keep_bool_masks
from ...modules.feed_forward import fold_activation
from ...modules.layer_norm import recompute_layer_norms, recomputing_norms

NO_ALIGNMENT = -1  # an alignment layer that no layer index matches


class LongInputBARTModel(BARTModel):
    encoder_class: type  # a TransformerEncoder(Base) subclass: (args, dictionary, embed_tokens)
    decoder_class: type  # a TransformerDecoder(Base) subclass: (args, dictionary, embed_tokens, no_encoder_attn)

    @classmethod
    def build_model(cls, args, task):
        args = as_bart_args(args)
        model = super().build_model(args, task)
        # every layer's feed-forward keeps one ffn-wide tensor for backward, not two
        for layer in [*model.encoder.layers, *model.decoder.layers]:
            fold_activation(layer, args.activation_fn)
        recompute_layer_norms(model)  # and no layer norm's output is kept: computed again in backward
        keep_bool_masks(model)  # and no dropout keeps a mask wider than a byte
        embed_step_positions(model.decoder)  # a decoding step may be given its position as a tensor
        return model

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return cls.encoder_class(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return cls.decoder_class(args, tgt_dict, embed_tokens, no_encoder_attn=getattr(args, "no_cross_attention", False))

    def set_beam_size(self, beam: int):
        """BART's beamable encoder-decoder attention, and the beam blocks that the decoder
        self-attention's cache reorders within."""
        super().set_beam_size(beam)
        set_cache_beams(self.decoder, beam)

    def training_capture_refusal(self) -> Optional[str]:
        """Why a training pass of this model cannot be captured as a CUDA graph, or None: its
        encoder must take what its pass reads back from the device from the batch's shape
        (``static_host_facts``), so that the pass reads nothing."""
        if not hasattr(self.encoder, "static_host_facts"):
            return f"{type(self.encoder).__name__} reads the device during its pass"
        return None

    @recomputing_norms
    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor],
        prev_output_tokens: Tensor,
        features_only: bool = False,
        return_all_hiddens: bool = False,
        host_facts: Optional[Tuple] = None,
        **unused,
    ):
        # src_tokens: the view's layout, e.g. (batch, max_pages, page_len); prev_output_tokens: (batch, tgt_len)
        # host_facts: what the encoder's pass would read back from the device, given by the caller
        # (``encoder.static_host_facts``, where the encoder has it: ``training_capture_refusal``)
        given = {} if host_facts is None else {"host_facts": host_facts}
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens, **given)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                            return_all_hiddens=return_all_hiddens)


def wrap_layer(layer: nn.Module, cfg) -> nn.Module:
    """What fairseq does with every layer it builds: activation checkpointing, then FSDP
    wrapping. ``cfg``: a TransformerConfig, or BART's Namespace."""
    if isinstance(cfg, argparse.Namespace):
        cfg = TransformerConfig.from_namespace(cfg)
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap if not cfg.checkpoint_activations else 0)


class SyncFreeEncoder:
    """Put before a fairseq encoder class: a forward pass asks the device once whether the
    source holds padding, not once per layer.

    fairseq's encoder keeps ``encoder_padding_mask.any()`` as a device tensor and tests it
    before every layer (``mask if has_pads else None``), which makes the host wait for the
    device twelve times in a ``bart.large`` forward pass. Here it is read back once, or given
    (``has_pads``) by an encoder that already knows it; the computation is fairseq's."""

    def static_host_facts(self, src_tokens: Tensor) -> Tuple[bool]:
        """What a pass over any batch of the shape of ``src_tokens`` may take for the fact it
        would read back, whether the source holds padding: that it does (the padding mask goes
        to every layer, all False where there is none)."""
        return (True,)

    def forward_scriptable(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None,
                           return_all_hiddens: bool = False, token_embeddings: Optional[Tensor] = None,
                           has_pads: Optional[bool] = None):
        padding = src_tokens.eq(self.padding_idx)  # (batch, src_len)
        if has_pads is None:
            has_pads = bool(padding.any())
        x, embedding = self.forward_embedding(src_tokens, token_embeddings)  # (batch, src_len, dim)
        if has_pads:  # padding positions start from zero, as in fairseq
            x = x * (1 - padding.unsqueeze(-1).type_as(x))
        x = x.transpose(0, 1)  # (src_len, batch, dim)
        states, fc_results = [x] if return_all_hiddens else [], []
        for layer in self.layers:
            out = layer(x, encoder_padding_mask=padding if has_pads else None)
            x, fc_result = out if isinstance(out, tuple) and len(out) == 2 else (out, None)
            if return_all_hiddens:
                states.append(x)
                fc_results.append(fc_result)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        lengths = src_tokens.ne(self.padding_idx).sum(dim=1, dtype=torch.int32).reshape(-1, 1).contiguous()
        return {
            "encoder_out": [x],  # (src_len, batch, dim)
            "encoder_padding_mask": [padding],  # (batch, src_len)
            "encoder_embedding": [embedding],  # (batch, src_len, dim)
            "encoder_states": states,  # [(src_len, batch, dim)]
            "fc_results": fc_results,
            "src_tokens": [],
            "src_lengths": [lengths],  # (batch, 1)
        }


class SyncFreeDecoder:
    """Put before a fairseq decoder class: no pass asks the device whether the summaries hold
    padding.

    fairseq's decoder computes the self-attention padding mask only if
    ``prev_output_tokens.eq(pad).any()``, which makes the host wait for the device at every
    decoding step and every training pass; with ``cross_self_attention`` set it computes the
    mask unconditionally. During a pass that flag is set on the decoder alone (the layers keep
    their own, which is what changes their attention), so the mask always goes to the
    self-attention: a decoding step keeps it with its cache, and a full pass, causal, has no
    need of it (``modules/decoder_self_attention.py``)."""

    def extract_features_scriptable(self, prev_output_tokens, encoder_out, incremental_state=None, *args, **kwargs):
        if self.cross_self_attention:
            return super().extract_features_scriptable(prev_output_tokens, encoder_out, incremental_state,
                                                       *args, **kwargs)
        self.cross_self_attention = True
        try:
            return super().extract_features_scriptable(prev_output_tokens, encoder_out, incremental_state,
                                                       *args, **kwargs)
        finally:
            self.cross_self_attention = False


class TokenWeightsOnRequest:
    """Put before a fairseq decoder class: a decoding step computes no attention weights
    unless its caller names an alignment layer.

    fairseq's decoder, given no alignment layer, has its last layer average the
    cross-attention weights over the heads at every step, and its beam search then stores
    them, (hypotheses, src_len) per step, and reorders them with the beams. A model whose
    generator reads no token weights (``mixes_pages`` False: HEPOS, AWESOME) pays for
    that at every step for nothing. A full forward pass keeps fairseq's default, so that
    fairseq's alignment generator (a forward pass over the finished hypotheses) still
    gets them."""

    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None,
                         full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                         alignment_heads: Optional[int] = None):
        if incremental_state is not None and alignment_layer is None:
            alignment_layer = NO_ALIGNMENT
        return super().extract_features(prev_output_tokens, encoder_out, incremental_state, full_context_alignment,
                                        alignment_layer, alignment_heads)
