"""The shapes of every model the project builds, in one table that imports nothing heavy.

* ``ARCHITECTURES``: the sizes every system's registered architectures come in, named as those
  end (``pagesum_bart_large``, ``hed_bart_base``, ``awesome_tiny``; full-attention BART's are
  fairseq's own ``bart_large`` and ``bart_base``). A ``*_bart_large`` or ``*_bart_base``
  architecture sets its size's dimensions and leaves the rest to fairseq's
  ``bart_large_architecture`` or ``bart_base_architecture``, whose own dimensions
  ``tests/test_one_owner.py`` holds equal to these; ``pagesum-convert`` names a transformers
  configuration by them, and the memory model prices them.
* ``BENCHMARK_SIZES``: the smaller shapes the benchmarks measure on a CPU.
* ``SYSTEMS``: each system's registered architectures and how it lays one training example out,
  which is what the memory model (``memory/model.py``) and ``pagesum-plan`` price.
* ``LOSS_CHUNK_TOKENS``: the default of the plugin's criterion (``--loss-chunk-tokens``).
* ``MASTER_BUCKET_BYTES``: the fp32 gradients that ``adamw_torch`` holds at once when it keeps
  the master weights itself (``--memory-efficient-bf16``), and that ``adafactor_batched`` updates
  at once.

Pure data, so that the lowest layer of the library (``memory``) and the commands that answer
without torch read it too.
"""

from dataclasses import dataclass
from typing import Dict, Tuple

SPECIAL_SYMBOLS = 4  # fairseq's dictionaries: <s>, <pad>, </s>, <unk> before the words of dict.txt


@dataclass(frozen=True)
class Architecture:
    """A BART-shaped transformer: the encoder and the decoder share every dimension."""

    layers: int  # encoder layers = decoder layers
    embed_dim: int  # d: the width of every layer's input and output
    ffn_dim: int  # the feed-forward layer's hidden width
    heads: int  # attention heads per layer
    vocab: int  # embedding rows: the dictionary's words and SPECIAL_SYMBOLS (BART's: and <mask>)
    positions: int = 1024  # learned positions per sequence, without fairseq's 2 offset rows


ARCHITECTURES: Dict[str, Architecture] = {
    "bart_large": Architecture(layers=12, embed_dim=1024, ffn_dim=4096, heads=16, vocab=50265),
    "bart_base": Architecture(layers=6, embed_dim=768, ffn_dim=3072, heads=12, vocab=50265),
    "tiny": Architecture(layers=2, embed_dim=64, ffn_dim=128, heads=4, vocab=64),  # for tests and CPU demos
}

BENCHMARK_SIZES: Dict[str, Architecture] = {
    # still BART-shaped, and quick on a 2-core CPU
    "cpu_small": Architecture(layers=2, embed_dim=256, ffn_dim=1024, heads=4, vocab=2004),
    # narrower, for inputs of many thousand tokens on a 2-core CPU
    "cpu_long_input": Architecture(layers=2, embed_dim=128, ffn_dim=512, heads=4, vocab=2004),
}


@dataclass(frozen=True)
class SystemShape:
    """A system's registered architectures and how it lays one training example out: an input of
    ``pages`` pages of ``page_tokens`` tokens (PageSum's pages, HED's documents, AWESOME's
    segments) or one flat sequence, read by encoder rows and written by decoder rows."""

    arch_prefix: str  # its architectures are named arch_prefix + size
    sizes: Tuple[str, ...] = tuple(ARCHITECTURES)  # the sizes it registers
    flat: bool = False  # one input sequence, with as many learned positions as tokens
    page_rows: bool = False  # every page is an encoder row of its own, all in one pass; else one row
    page_decoders: bool = False  # a decoder row per page, mixed by page weights (d x 1 and a bias); else one
    encoder_window: bool = False  # an encoder query reads two windows of keys at most, not its whole row
    memory: bool = False  # an encoder query reads the memory's slots too, and the memory adds parameters
    cross_stride: bool = False  # a cross-attention head reads every stride-th source token of its row
    cross_input: bool = False  # a decoder row reads the whole input, not only its own encoder row
    chunked_loss: bool = True  # its recipes train with the plugin's criterion, LOSS_CHUNK_TOKENS at a time


SYSTEMS: Dict[str, SystemShape] = {  # keyed by the fairseq model each registers its architectures for
    "pagesum": SystemShape("pagesum_", page_rows=True, page_decoders=True),
    "bart": SystemShape("", sizes=("bart_large", "bart_base"), flat=True),  # fairseq's BART
    "hepos": SystemShape("hepos_", flat=True, encoder_window=True, cross_stride=True),
    "hed": SystemShape("hed_", page_rows=True, cross_input=True),  # a page is a document
    "awesome": SystemShape("awesome_", memory=True),  # one segment in the graph at a time
}

# HEPOS's settings (Section 6.2: w = 256, s_h = 4): the hepos model's defaults and what the memory model prices
HEPOS_WINDOW = 256  # the encoder's sliding window (its LSH and Sinkhorn layers read about as many keys)
HEPOS_STRIDE = 4  # a cross-attention head reads every s_h-th source token
# AWESOME's memory slots per layer (m) at each size: 1,024 at BART-large (Sec. 3.1), d at BART-base, 8 for tests
AWESOME_SLOTS = {"bart_large": 1024, "bart_base": 768, "tiny": 8}

# Summary tokens whose logits the plugin's criterion computes at once (``--loss-chunk-tokens``,
# ``criterions/paged_cross_entropy.py``), so that the memory model prices what training runs.
LOSS_CHUNK_TOKENS = 64

# fp32 gradients that ``adamw_torch``'s memory-efficient update converts at once, and that
# ``adafactor_batched`` updates at once (``optim/``), so that the memory model prices them too
MASTER_BUCKET_BYTES = 256 * 2**20


def architecture_name(system: str, size: str) -> str:
    """The registered architecture of ``system`` at ``size``: ``pagesum_bart_large``, ``bart_base``."""
    return SYSTEMS[system].arch_prefix + size


def architecture(name: str) -> Tuple[str, Architecture]:
    """(system, dimensions) of a registered architecture name such as ``pagesum_bart_large``
    (``bart_large`` is full-attention BART)."""
    for system, shape in SYSTEMS.items():
        for size in shape.sizes:
            if architecture_name(system, size) == name:
                return system, ARCHITECTURES[size]
    known = ", ".join(architecture_name(system, size) for system, shape in SYSTEMS.items() for size in shape.sizes)
    raise ValueError(f"unknown architecture {name!r}; known: {known}")
