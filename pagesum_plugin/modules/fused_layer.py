"""The attentions every decoder layer of this plugin builds, in place of fairseq's.

``FusedAttentionLayer`` goes before a fairseq decoder layer class in its bases: the layer's
self-attention is ``DecoderSelfAttention`` (SDPA in training, a cache written once per
position in decoding), its encoder-decoder attention ``FusedCrossAttention`` (SDPA), and it
computes attention weights only in the layer the decoder asks them of (its alignment
layer), not in every layer at every step as fairseq's default does. A layer with its own
encoder-decoder attention (HEPOS, HED) overrides ``build_encoder_attention`` as before.
"""

import argparse

from fairseq.models.transformer import TransformerConfig
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase

from .decoder_self_attention import DecoderSelfAttention
from .fused_attention import FusedCrossAttention


def as_config(cfg) -> TransformerConfig:
    """fairseq's layers are built from a TransformerConfig or, in their legacy form, BART's Namespace."""
    return TransformerConfig.from_namespace(cfg) if isinstance(cfg, argparse.Namespace) else cfg


class FusedAttentionLayer:
    """Put before a fairseq decoder layer class: its self-attention keeps an in-place cache
    and runs through SDPA, its encoder-decoder attention runs through SDPA, and it computes
    attention weights only when the decoder asks (its alignment layer), not in every layer."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.need_attn = False  # fairseq's default, True, has every layer average its weights at every step

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        cfg = as_config(cfg)
        return DecoderSelfAttention(
            embed_dim, cfg.decoder.attention_heads, dropout=cfg.attention_dropout, add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn, self_attention=not cfg.cross_self_attention, q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size, xformers_att_config=cfg.decoder.xformers_att_config,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        cfg = as_config(cfg)
        return FusedCrossAttention(
            embed_dim, cfg.decoder.attention_heads, kdim=cfg.encoder.embed_dim, vdim=cfg.encoder.embed_dim,
            dropout=cfg.attention_dropout, encoder_decoder_attention=True, q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size, xformers_att_config=cfg.encoder.xformers_att_config,
        )


class FusedDecoderLayer(FusedAttentionLayer, TransformerDecoderLayerBase):
    """BART's decoder layer with these attentions."""
