"""What every model of this plugin shares with BART's arguments.

BART is a legacy (argparse) fairseq model; ``fairseq-hydra-train`` hands it an OmegaConf
node instead: every model that subclasses ``BARTModel`` builds from ``as_bart_args``. Every
architecture sets its size's dimensions from ``pagesum_plugin.architectures`` with
``bart_dimensions``: ``*_bart_large``, ``*_bart_base`` and the ``*_tiny`` architectures, which
share one small BART shape for tests and CPU demos."""

import argparse

from omegaconf import OmegaConf

from ...architectures import ARCHITECTURES


def as_bart_args(args):
    """A Namespace that BART's layers and its checkpoint upgrade can read, whatever built it."""
    if OmegaConf.is_config(args):
        args = argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
    if not hasattr(args, "task"):
        args.task = None  # BART's checkpoint upgrade reads it; a Hydra model config does not hold it
    return args


def bart_dimensions(args, size: str):
    """The dimensions of ``ARCHITECTURES[size]``, each set unless given, as fairseq's BART
    architectures set them: the decoder's width and feed-forward follow the encoder's. The
    caller then applies ``bart_large_architecture`` or ``bart_base_architecture`` for the rest."""
    arch = ARCHITECTURES[size]
    for name, value in (("encoder_embed_dim", arch.embed_dim), ("encoder_ffn_embed_dim", arch.ffn_dim),
                        ("encoder_layers", arch.layers), ("encoder_attention_heads", arch.heads),
                        ("decoder_layers", arch.layers), ("decoder_attention_heads", arch.heads)):
        setattr(args, name, getattr(args, name, value))
