"""What every model of this plugin shares with BART's arguments.

BART is a legacy (argparse) fairseq model; ``fairseq-hydra-train`` hands it an OmegaConf
node instead: every model that subclasses ``BARTModel`` builds from ``as_bart_args``. Every
model also has a ``*_tiny`` architecture of the same small BART shape, for tests and CPU
demos: ``tiny_dimensions``."""

import argparse

from omegaconf import OmegaConf


def as_bart_args(args):
    """A Namespace that BART's layers and its checkpoint upgrade can read, whatever built it."""
    if OmegaConf.is_config(args):
        args = argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
    if not hasattr(args, "task"):
        args.task = None  # BART's checkpoint upgrade reads it; a Hydra model config does not hold it
    return args


def tiny_dimensions(args):
    """The ``*_tiny`` architectures' BART shape: width 64, feed-forward 128, 2 + 2 layers of
    4 heads (set unless given); the caller then applies ``bart_base_architecture``'s rest."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 64)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 128)
    args.encoder_layers = getattr(args, "encoder_layers", 2)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
