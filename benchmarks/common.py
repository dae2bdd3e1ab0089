"""What the benchmarks share: model sizes (from ``pagesum_plugin.architectures``), start-up, model
building, synthetic paged batches, the training step, timing and peak-memory measurement, and
markdown tables.

The benchmarks measure cost, not quality, so their inputs are random word ids laid
out exactly as the ``paged_summarization`` task lays them out: every page is
``<s> words </s>``, a padding page is all ``<pad>``, and the decoder input is the
target ``<s> summary </s>`` shifted right.
"""

import argparse
import gc
import logging
import tempfile
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from fairseq.data import Dictionary
from torch.nn.attention import SDPBackend
from torch.utils._python_dispatch import TorchDispatchMode

from pagesum_plugin.architectures import ARCHITECTURES, BENCHMARK_SIZES, SPECIAL_SYMBOLS, Architecture
from pagesum_plugin.checkpoints import builder
from pagesum_plugin.checkpoints.builder import dictionary_directory
from pagesum_plugin.criterions.paged_cross_entropy import PagedLabelSmoothedCrossEntropy
from pagesum_recipes.profiling import (best_seconds, describe_device, device_nearly_full,  # noqa: F401  (re-exported)
                                      is_out_of_memory, peak_memory)


@dataclass(frozen=True)
class ModelSize:
    """Transformer dimensions shared by PageSum and its full-attention BART baseline."""

    embed_dim: int
    ffn_dim: int
    layers: int  # encoder layers = decoder layers, as in BART
    heads: int
    vocab_words: int  # dictionary size without the 4 special symbols

    @classmethod
    def of(cls, arch: Architecture) -> "ModelSize":
        return cls(arch.embed_dim, arch.ffn_dim, arch.layers, arch.heads, arch.vocab - SPECIAL_SYMBOLS)

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


BART_LARGE = ModelSize.of(ARCHITECTURES["bart_large"])
BART_BASE = ModelSize.of(ARCHITECTURES["bart_base"])
CPU_SMALL = ModelSize.of(BENCHMARK_SIZES["cpu_small"])
CPU_TINY = ModelSize.of(ARCHITECTURES["tiny"])  # for decoding speed and fidelity on CPU
CPU_LONG_INPUT = ModelSize.of(BENCHMARK_SIZES["cpu_long_input"])
# the long-input benchmarks' (hepos_memory, awesome_memory) size on each --device
LONG_INPUT_SIZES = {"cpu": CPU_LONG_INPUT, "cuda": BART_LARGE}

# --attention: which kernels ``F.scaled_dot_product_attention`` may use. ``math``, the
# reference kernel, materialises every (heads, length, length) score matrix, as BART's
# original attention does; ``fused`` lets torch pick flash / memory-efficient kernels.
ATTENTION_KERNELS = {
    "math": [SDPBackend.MATH],
    "fused": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH],
}


def add_device_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true", help="a smaller grid and fewer repeats, for a smoke run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")


def device_defaults(args: argparse.Namespace, **defaults: Tuple[int, int]) -> argparse.Namespace:
    """Fills in each option named in ``defaults`` that was left unset with its default on
    ``args.device``, given as (CUDA, CPU); returns ``args``."""
    for name, (on_cuda, on_cpu) in defaults.items():
        if not getattr(args, name):
            setattr(args, name, on_cuda if args.device == "cuda" else on_cpu)
    return args


def start(args: argparse.Namespace) -> Tuple[torch.device, torch.dtype]:
    """Quiets fairseq's and the plugin's INFO logs, checks ``--device``, applies ``--threads``;
    returns the device and the dtype the models run in (bf16 on CUDA, fp32 on CPU)."""
    for name in ("fairseq", "pagesum_plugin"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to torch")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    return device, torch.bfloat16 if device.type == "cuda" else torch.float32


def make_dictionary(size: ModelSize) -> Dictionary:
    """A dictionary of ``size.vocab_words`` made-up words."""
    dictionary = Dictionary()
    for i in range(size.vocab_words):
        dictionary.add_symbol(f"w{i}")
    dictionary.pad_to_multiple_(8)
    return dictionary


def build_model(arch: str, size: ModelSize, *extra_args: str, dropout: float = 0.1,
                task: str = "paged_summarization"):
    """(task, model) for a registered ``arch`` (``pagesum_bart_large``, ``bart_large``,
    ``hepos_bart_large``, ...) of ``task`` with the dimensions of ``size``; weights are
    freshly initialised."""
    with tempfile.TemporaryDirectory() as data_dir:
        dictionary_directory(make_dictionary(size), data_dir)
        _, fairseq_task, model = builder.build_model(data_dir, arch, "--dropout", str(dropout), *size.arch_args(),
                                                     *extra_args, task=task)
        return fairseq_task, model


def random_words(dictionary: Dictionary, shape: Tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Ordinary words (no special symbol) of any ``shape``."""
    return torch.randint(dictionary.nspecial, len(dictionary), shape, generator=generator)


def random_tokens(dictionary: Dictionary, shape: Tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """``shape`` of random words framed ``<s> words </s>`` along the last dimension."""
    tokens = random_words(dictionary, shape, generator)
    tokens[..., 0] = dictionary.bos()
    tokens[..., -1] = dictionary.eos()
    return tokens


def paged_source(dictionary: Dictionary, batch: int, pages: int, page_len: int, generator: torch.Generator):
    """(batch, pages, page_len) full pages of ``<s> words </s>``."""
    return random_tokens(dictionary, (batch, pages, page_len), generator)


def summary_io(dictionary: Dictionary, batch: int, tgt_len: int, generator: torch.Generator):
    """(target, prev_output_tokens), each (batch, tgt_len): ``<s> s </s>`` and ``</s> <s> s``."""
    target = random_tokens(dictionary, (batch, tgt_len), generator)
    prev_output_tokens = torch.roll(target, 1, dims=1)
    return target, prev_output_tokens


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, pad: int, reduction: str = "mean"):
    """Label-smoothed (0.1) cross entropy in fp32 of logits (..., vocab) against target (...),
    padding ignored."""
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), target.reshape(-1), ignore_index=pad,
                           label_smoothing=0.1, reduction=reduction)


def training_step(model: torch.nn.Module, src_tokens: torch.Tensor, target: torch.Tensor,
                  prev_output_tokens: torch.Tensor, pad: int, reduction: str = "mean") -> Callable[[], None]:
    """One training step without the optimizer update: forward, ``label_smoothed_loss``,
    backward. ``target`` and ``prev_output_tokens`` are (batch, tgt_len)."""

    def step():
        model.zero_grad(set_to_none=True)
        logits, _ = model(src_tokens, None, prev_output_tokens)  # (batch, tgt_len, vocab)
        label_smoothed_loss(logits, target, pad, reduction).backward()

    return step


class Backward:
    """What a training step needs of fairseq's optimizer wrapper: ``backward(loss)``."""

    @staticmethod
    def backward(loss: torch.Tensor) -> None:
        loss.backward()


def criterion_and_sample(task, src_tokens: torch.Tensor, target: torch.Tensor, prev_output_tokens: torch.Tensor,
                         loss_chunk_tokens: int):
    """(criterion, sample): the plugin's criterion (``paged_label_smoothed_cross_entropy``, label
    smoothing 0.1), whose loss takes ``loss_chunk_tokens`` summary tokens at a time (0: the whole
    batch's logits at once), and the batch as it reads it. ``target`` and
    ``prev_output_tokens`` are (batch, tgt_len)."""
    criterion = PagedLabelSmoothedCrossEntropy(task, sentence_avg=False, label_smoothing=0.1,
                                               loss_chunk_tokens=loss_chunk_tokens)
    pad = task.target_dictionary.pad()
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": None, "prev_output_tokens": prev_output_tokens},
              "target": target, "ntokens": int(target.ne(pad).sum())}
    return criterion, sample


def criterion_step(model: torch.nn.Module, task, src_tokens: torch.Tensor, target: torch.Tensor,
                   prev_output_tokens: torch.Tensor, loss_chunk_tokens: int) -> Callable[[], None]:
    """One training step without the optimizer update through the plugin's criterion
    (``criterion_and_sample``): forward, loss, backward."""
    criterion, sample = criterion_and_sample(task, src_tokens, target, prev_output_tokens, loss_chunk_tokens)

    def step():
        model.zero_grad(set_to_none=True)
        loss, _, _ = criterion(model, sample)
        loss.backward()

    return step


def peak_step_bytes(fn: Callable[[], object], device: torch.device, modules: Sequence[torch.nn.Module],
                    root: Optional[torch.nn.Module] = None) -> int:
    """Peak tensor memory that one call of ``fn`` adds on top of what was allocated before it
    (``pagesum_recipes.profiling.peak_memory``: the CUDA allocator, or torch's MemTracker on CPU;
    ``root``: a module that ``fn`` calls more than once)."""
    return peak_memory(fn, device, modules, root=root).added


def measure_step(step: Callable[[], None], device: torch.device, repeats: int, modules: Sequence[torch.nn.Module],
                 root: Optional[torch.nn.Module] = None) -> Optional[Dict[str, float]]:
    """``{"mb": peak MB, "s": seconds}`` of a training step of ``modules``: the fastest of
    ``repeats`` timed steps after a warm-up, then the peak memory of one more (``root`` as in
    ``peak_step_bytes``); on CUDA also ``reserved_mb`` and ``gpu_mb``, the step's peaks as the
    allocator and the GPU see them (``cuda_peaks``). None when the device runs out of memory
    (``is_out_of_memory``). The gradients are freed and the memory released afterwards."""
    try:
        seconds = best_seconds(step, device, repeats)
        for module in modules:
            module.zero_grad(set_to_none=True)  # the measured step allocates its gradients afresh
        peak = peak_step_bytes(step, device, modules, root)
        gpu = cuda_peaks(device)
    except RuntimeError as error:
        if not is_out_of_memory(error, device_nearly_full(device)):
            raise
        return None
    finally:
        for module in modules:
            module.zero_grad(set_to_none=True)
        free_memory(device)
    result = {"mb": peak / 2**20, "s": seconds}
    if gpu is not None:
        result.update(reserved_mb=gpu.reserved / 2**20, gpu_mb=gpu.device / 2**20)
    return result


@dataclass(frozen=True)
class CudaPeaks:
    """The peak memory of a call as three observers see it, in bytes."""

    allocated: int  # tensors (the caching allocator's max_memory_allocated)
    reserved: int  # what the caching allocator held from the driver (max_memory_reserved)
    device: int  # reserved + what the process holds outside the allocator (the CUDA context, library
    #              workspaces): what nvidia-smi shows at the peak, i.e. what a user's GPU must have free


def cuda_peaks(device: torch.device) -> Optional[CudaPeaks]:
    """The peaks since the last ``torch.cuda.reset_peak_memory_stats`` (``peak_memory`` resets
    them when a measured call starts); None on the CPU, whose allocator keeps no such counts.
    Outside the allocator: the memory in use by the driver's count (``mem_get_info``) less what
    the allocator holds now, taken before any cache is emptied."""
    if device.type != "cuda":
        return None
    free, total = torch.cuda.mem_get_info(device)
    outside = (total - free) - torch.cuda.memory_reserved(device)
    reserved = torch.cuda.max_memory_reserved(device)
    return CudaPeaks(torch.cuda.max_memory_allocated(device), reserved, reserved + outside)


def free_memory(device: torch.device) -> None:
    """Release what the last measurement left: Python's garbage, and CUDA's cached blocks."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def result_cell(result: Optional[Dict[str, float]], key: str) -> str:
    """One ``measure_step`` result in a table: ``mb`` in whole MB, ``s`` to 10 ms, OOM for None."""
    if result is None:
        return "OOM"
    return f"{result[key]:.0f}" if key == "mb" else f"{result[key]:.2f}"


def runs_a_kernel(func) -> bool:
    """Whether an operator computes or copies (a GPU runs a kernel for it), rather than only
    describing a tensor anew (a view: what a GPU launches nothing for, and a captured graph
    costs nothing for)."""
    return not (func.is_view or func is torch.ops.aten._unsafe_view.default)


class Launched(TorchDispatchMode):
    """The ATen operators dispatched while active (``operators``: what each costs the host to
    launch), and those of them that run a kernel (``kernels``)."""

    def __init__(self):
        super().__init__()
        self.operators, self.kernels = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.operators += 1
        self.kernels += runs_a_kernel(func)
        return func(*args, **(kwargs or {}))


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")
