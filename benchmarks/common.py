"""What the benchmarks share: model sizes, model building, synthetic paged batches,
timing and peak-memory measurement, and markdown tables.

The benchmarks measure cost, not quality, so their inputs are random word ids laid
out exactly as the ``paged_summarization`` task lays them out: every page is
``<s> words </s>``, a padding page is all ``<pad>``, and the decoder input is the
target ``<s> summary </s>`` shifted right.
"""

import argparse
import tempfile
from dataclasses import dataclass
from typing import Callable, List, Sequence, Tuple

import torch
from fairseq.data import Dictionary

from pagesum_plugin.checkpoints import builder
from pagesum_plugin.checkpoints.builder import dictionary_directory
from pagesum_plugin.profiling import best_seconds, peak_memory, synchronize  # noqa: F401  (the benchmarks' timing)

@dataclass(frozen=True)
class ModelSize:
    """Transformer dimensions shared by PageSum and its full-attention BART baseline."""

    embed_dim: int
    ffn_dim: int
    layers: int  # encoder layers = decoder layers, as in BART
    heads: int
    vocab_words: int  # dictionary size without the 4 special symbols

    def arch_args(self) -> List[str]:
        dims = {
            "encoder-embed-dim": self.embed_dim,
            "decoder-embed-dim": self.embed_dim,
            "encoder-ffn-embed-dim": self.ffn_dim,
            "decoder-ffn-embed-dim": self.ffn_dim,
            "encoder-layers": self.layers,
            "decoder-layers": self.layers,
            "encoder-attention-heads": self.heads,
            "decoder-attention-heads": self.heads,
        }
        return [arg for name, value in dims.items() for arg in (f"--{name}", str(value))]


# bart.large: 12+12 layers, d=1024, 16 heads, GPT-2 BPE vocabulary (50264 words + specials)
BART_LARGE = ModelSize(embed_dim=1024, ffn_dim=4096, layers=12, heads=16, vocab_words=50260)
# small enough for a 2-core CPU, still BART-shaped
CPU_SMALL = ModelSize(embed_dim=256, ffn_dim=1024, layers=2, heads=4, vocab_words=2000)
# the pagesum_tiny architecture's dimensions, for decoding speed and fidelity on CPU
CPU_TINY = ModelSize(embed_dim=64, ffn_dim=128, layers=2, heads=4, vocab_words=60)


def add_device_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="a smaller grid and fewer repeats, for a smoke run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")


def setup_device(args: argparse.Namespace) -> torch.device:
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to torch")
    if args.threads:
        torch.set_num_threads(args.threads)
    return torch.device(args.device)


def make_dictionary(size: ModelSize) -> Dictionary:
    """A dictionary of ``size.vocab_words`` made-up words."""
    dictionary = Dictionary()
    for i in range(size.vocab_words):
        dictionary.add_symbol(f"w{i}")
    dictionary.pad_to_multiple_(8)
    return dictionary


def build_model(arch: str, size: ModelSize, *extra_args: str, dropout: float = 0.1):
    """(task, model) for a registered ``arch`` (``pagesum_bart_large`` or ``bart_large``)
    with the dimensions of ``size``; weights are freshly initialised."""
    with tempfile.TemporaryDirectory() as data_dir:
        dictionary_directory(make_dictionary(size), data_dir)
        _, task, model = builder.build_model(data_dir, arch, "--dropout", str(dropout), *size.arch_args(), *extra_args)
        return task, model


def random_words(dictionary: Dictionary, shape: Tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    return torch.randint(dictionary.nspecial, len(dictionary), shape, generator=generator)


def paged_source(dictionary: Dictionary, batch: int, pages: int, page_len: int, generator: torch.Generator):
    """(batch, pages, page_len) full pages of ``<s> words </s>``."""
    src = random_words(dictionary, (batch, pages, page_len), generator)
    src[:, :, 0] = dictionary.bos()
    src[:, :, -1] = dictionary.eos()
    return src


def summary_io(dictionary: Dictionary, batch: int, tgt_len: int, generator: torch.Generator):
    """(target, prev_output_tokens), each (batch, tgt_len): ``<s> s </s>`` and ``</s> <s> s``."""
    target = random_words(dictionary, (batch, tgt_len), generator)
    target[:, 0] = dictionary.bos()
    target[:, -1] = dictionary.eos()
    prev_output_tokens = torch.roll(target, 1, dims=1)
    return target, prev_output_tokens


def peak_step_bytes(fn: Callable[[], object], device: torch.device, modules: Sequence[torch.nn.Module]) -> int:
    """Peak tensor memory that one call of ``fn`` adds on top of what was allocated before it
    (``pagesum_plugin.profiling.peak_memory``: the CUDA allocator, or torch's MemTracker on CPU)."""
    return peak_memory(fn, device, modules).added


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def describe_machine(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}"
