"""BART is a legacy (argparse) fairseq model; ``fairseq-hydra-train`` hands it an OmegaConf
node instead. Every model of this plugin that subclasses ``BARTModel`` builds from this."""

import argparse

from omegaconf import OmegaConf


def as_bart_args(args):
    """A Namespace that BART's layers and its checkpoint upgrade can read, whatever built it."""
    if OmegaConf.is_config(args):
        args = argparse.Namespace(**OmegaConf.to_container(args, resolve=True))
    if not hasattr(args, "task"):
        args.task = None  # BART's checkpoint upgrade reads it; a Hydra model config does not hold it
    return args
