"""PageSum at bart.large scale: every row of the scale benchmark, measured in one run.

Weights are random (cost does not depend on them); inputs are the benchmarks' random
paged documents (``benchmarks.common``). On CUDA the models have the ``bart.large``
dimensions (12+12 layers, d=1024, ffn 4096, 16 heads, ~50k vocabulary) in bf16; on CPU,
for a smoke run, the ``pagesum_tiny`` dimensions in fp32 on tiny lengths. The script prints
a setup line, then one markdown table per row group, each with its goal and a verdict
computed from the measurement. A verdict that only means something at bart.large scale on a
GPU reads "n/a on CPU" (with what the tiny run gave in brackets).

Attention. Every row runs with torch's fused SDPA kernels allowed (flash, memory-efficient,
cuDNN, then math). fairseq only calls ``F.scaled_dot_product_attention`` for attention
without a cache and without ``static_kv``: the encoder's and the decoder's self-attention in
training. Cross-attention (``static_kv=True``) and every attention of incremental decoding
take fairseq's own bmm + softmax path. The setup line and the decoding caption list the
kernels each attention really ran (aten ops seen inside its module).

Rows
1. Training peak memory: PageSum on ``--pages`` x ``--page-len`` source tokens (20 x 1024),
   a ``--tgt-len`` summary (1024), batch 1, activation checkpointing
   (``--checkpoint-activations``: fairseq's ``checkpoint_wrapper`` around every layer), one
   full optimizer update: forward, label-smoothed loss, backward, Adam step. The optimizer is
   fairseq's own ``--bf16`` one, built from fairseq's parsed options: ``FP16Optimizer`` around
   ``FairseqAdam``, i.e. bf16 weights and gradients in the model, fp32 master weights, fp32
   master gradients and fp32 Adam moments in the optimizer (2 + 2 + 4 + 4 + 8 = 20 bytes per
   parameter at the peak). Reported: what is held before the update (weights, master copy,
   its gradients, Adam moments; ``pagesum_plugin.profiling.peak_memory``'s ``before``) and the
   peak during it, in GB (10^9 bytes). Goal: peak <= 16 GB.
2. Training peak memory growth: ``benchmarks.memory_scaling`` (its models, its step:
   forward + backward, no checkpointing, no optimizer; its ``peak MB`` on top of the
   weights) for ``--growth-pages`` pages against a full-attention BART on the same tokens as
   one sequence, its positions extended, under the fused kernels and under the math kernel
   (the score matrix stored, as BART's original attention does). Growth: peak over the peak
   at the fewest pages. Goal: PageSum linear, i.e. growth <= 1.25 x the page ratio; and
   where full attention stops (OOM).
3. Training throughput: PageSum on ``--mfu-pages`` x page-len (7 x 1024), the same summary,
   no checkpointing, the update of row 1, for batches 1, 2, 4, ... up to ``--max-batch`` or
   the first OOM. Model FLOPs per update, counted from the model's matrix shapes:

       FLOPs = 6 x [ (N_enc + N_kv) B P S  +  N_dec B P T  +  N_out B T
                     + 2 d B P (L_enc S^2 + L_dec (T^2 + T S)) ]

   B batch, P pages, S page length, T summary length, d model width; N_enc the encoder's
   linear weights (per source token), N_kv the cross-attention key/value projections (per
   source token: each page's keys and values are projected once), N_dec the decoder's other
   linear weights (per summary token and page: the decoder runs once per page), N_out the
   output projection V x d (once per summary token, after the pages are mixed). 2 x weights
   FLOPs per token forward, twice that backward: 6. Attention: the scores Q K^T and the
   context P V, d multiply-adds each per (query, key) pair, counted in full (the causal mask
   is a dense mask: the kernels compute every score). Checkpointing's recomputation is not
   model FLOPs. At small sizes under the math kernel the formula agrees with
   ``torch.utils.flop_counter.FlopCounterMode`` to 0.01% (the page mixing is left out).
   MFU = FLOPs / update time / the GPU's bf16 dense peak. Goal: MFU >= 40% at the largest
   batch that fits.
4. Decoding throughput: beam search (``beam_cache.generator_for``: summary length forced to
   exactly ``--out-lens`` tokens) over ``--decode-pages`` x page-len pages, beam 4, batches
   ``--batches``, each example's pages shared by its beams against one copy per beam (the
   layout before beam sharing, ``set_beam_size(beam, share_pages=False)``). tokens/s =
   batch x beam x summary tokens / search time (as ``generation_speed``); the step time is
   the mean interval between the generator's decoder calls (``beam_cache.DecoderCalls``), so
   the encoder pass is not in it. Bytes one step must read, in the model's dtype:

       decoder weights (all but the cross-attention k/v projections and the positions)
       + cross-attention keys and values: L_dec x 2 x B x P x S x d (x beam when per beam)
       + self-attention cache: L_dec x 2 x B x beam x P x t x d, t its mean length

   bound = bytes / the GPU's memory bandwidth. Goals: shared >= 2x per beam; shared step
   <= 3x the bound.
5. Page pruning: ``generation_speed.decoding_rate`` with ``top_pages`` k = ``--top-pages``
   (2 of 7) against all pages, for every batch and summary length of row 4, and
   ``generation_speed``'s fidelity table. Goal: >= 3x faster. The fidelity table runs at
   its own size (``pagesum_tiny`` trained on the salient-page task: a random bart.large has
   no page preference to preserve, and that code fixes its size), and says so.

Peaks: bf16 dense FLOP/s and memory bandwidth by GPU name (``GPU_PEAKS``), or
``--peak-tflops`` / ``--peak-bandwidth``.

    python -m benchmarks.scale --device cuda
    python -m benchmarks.scale --device cpu --quick --threads 1
"""

import argparse
import contextlib
import logging
import platform
import re
import shlex
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from typing import Callable, Dict, List, Optional, Set, Tuple, TypeVar

import fairseq
import torch
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.modules import MultiheadAttention
from fairseq.optim.fp16_optimizer import FP16Optimizer
from torch import nn
from torch.nn.attention import sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks import memory_scaling
from benchmarks.beam_cache import DecoderCalls, generator_for, tensor_bytes
from benchmarks.common import (ATTENTION_KERNELS, BART_LARGE, CPU_TINY, ModelSize, add_device_args, best_seconds,
                               build_model, describe_device, device_defaults, dtype_name, free_memory,
                               label_smoothed_loss, make_dictionary, markdown_table, paged_source, start, summary_io)
from benchmarks.generation_speed import FIDELITY_TASK, decoding_rate, fidelity_rows, net_input
from pagesum_plugin.checkpoints import builder
from pagesum_plugin.profiling import PeakMemory, peak_memory, synchronize

T = TypeVar("T")
GB = 1e9
# (pattern of torch.cuda.get_device_name, bf16 dense FLOP/s, memory bandwidth B/s), first match wins
GPU_PEAKS = (
    (r"\bH100 PCIe", 756e12, 2.0e12),
    (r"\bH100 NVL", 835e12, 3.9e12),
    (r"\bH100\b", 989e12, 3.35e12),  # SXM: "NVIDIA H100 80GB HBM3"
    (r"\bH200\b", 989e12, 4.8e12),
    (r"\bA100\b.*80GB", 312e12, 2.0e12),
    (r"\bA100\b", 312e12, 1.555e12),  # 40GB
)
MEMORY_GOAL = 16 * GB
LINEAR_SLACK = 1.25  # PageSum's growth counts as linear up to 1.25x the page ratio
MFU_GOAL = 0.40
SHARING_GOAL = 2.0
BANDWIDTH_GOAL = 3.0  # step time within 3x the bandwidth bound
PRUNING_GOAL = 3.0
KERNEL_NAMES = {  # aten op seen inside an attention module -> kernel
    "_scaled_dot_product_flash_attention": "SDPA flash",
    "_scaled_dot_product_flash_attention_for_cpu": "SDPA flash (CPU)",
    "_scaled_dot_product_efficient_attention": "SDPA memory-efficient",
    "_scaled_dot_product_cudnn_attention": "SDPA cuDNN",
    "bmm": "bmm + softmax",
    "baddbmm": "bmm + softmax",
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--pages", type=int, help="row 1: pages (default: 20 on CUDA, 2 on CPU)")
    parser.add_argument("--page-len", type=int, help="tokens per page (default: 1024 on CUDA, 32 on CPU)")
    parser.add_argument("--tgt-len", type=int, help="rows 1 and 3: summary tokens (default: 1024 on CUDA, 8 on CPU)")
    parser.add_argument("--growth-pages", type=int, nargs="+", help="row 2 (default: 1 2 4 8 16 20; CPU: 1 2)")
    parser.add_argument("--growth-tgt-len", type=int, help="row 2: summary tokens (default: 256 on CUDA, 8 on CPU)")
    parser.add_argument("--mfu-pages", type=int, help="row 3: pages (default: 7 on CUDA, 2 on CPU)")
    parser.add_argument("--max-batch", type=int, help="row 3: largest batch tried (default: 64 on CUDA, 2 on CPU)")
    parser.add_argument("--decode-pages", type=int, help="rows 4-5: pages (default: 7 on CUDA, 2 on CPU)")
    parser.add_argument("--out-lens", type=int, nargs="+", help="rows 4-5: summary tokens (default: 256 900; CPU: 4 8)")
    parser.add_argument("--batches", type=int, nargs="+", help="rows 4-5: batch sizes (default: 1 8; CPU: 1 2)")
    parser.add_argument("--beam", type=int, default=4, help="rows 4-5: beam size")
    parser.add_argument("--top-pages", type=int, help="row 5: pages kept (default: 2 on CUDA, 1 on CPU)")
    parser.add_argument("--repeats", type=int, help="timed runs per configuration (default: 2, --quick: 1)")
    parser.add_argument("--train-updates", type=int, help="updates of the fidelity models (default: 600, --quick: 30)")
    parser.add_argument("--fidelity-docs", type=int, help="held-out documents of the fidelity table (default: 200, "
                        "--quick: 16)")
    parser.add_argument("--peak-tflops", type=float, help="the GPU's bf16 dense peak in TFLOP/s (default: GPU_PEAKS)")
    parser.add_argument("--peak-bandwidth", type=float, help="the GPU's memory bandwidth in TB/s (default: GPU_PEAKS)")
    args = device_defaults(parser.parse_args(argv), pages=(20, 2), page_len=(1024, 32), tgt_len=(1024, 8),
                           growth_pages=([1, 2, 4, 8, 16, 20], [1, 2]), growth_tgt_len=(256, 8), mfu_pages=(7, 2),
                           max_batch=(64, 2), decode_pages=(7, 2), out_lens=([256, 900], [4, 8]),
                           batches=([1, 8], [1, 2]), top_pages=(2, 1))
    if not 0 < args.top_pages < args.decode_pages:
        parser.error(f"--top-pages must keep fewer than the {args.decode_pages} pages of --decode-pages")
    args.repeats = args.repeats or (1 if args.quick else 2)
    args.train_updates = args.train_updates or (30 if args.quick else 600)
    args.fidelity_docs = args.fidelity_docs or (16 if args.quick else 200)
    return args


# ---- peaks, verdicts, memory -----------------------------------------------------------------


def gpu_peaks(args, device: torch.device) -> Tuple[Optional[float], Optional[float], str]:
    """(bf16 dense FLOP/s, bytes/s, where they came from); None where unknown."""
    flops = args.peak_tflops * 1e12 if args.peak_tflops else None
    bandwidth = args.peak_bandwidth * 1e12 if args.peak_bandwidth else None
    source = "CPU: only --peak-tflops / --peak-bandwidth"
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        match = next(((f, b) for pattern, f, b in GPU_PEAKS if re.search(pattern, name)), (None, None))
        flops, bandwidth = flops or match[0], bandwidth or match[1]
        source = f"GPU_PEAKS[{name}]" if match[0] else "options (GPU not in GPU_PEAKS)"
    return flops, bandwidth, source


def verdict(ok: Optional[bool], device: torch.device, missing: str = "") -> str:
    """Met or not; on CPU, where the goals' scale is not reached, 'n/a' with the tiny run's
    result. ``ok`` None: a GPU peak was needed and is unknown (``missing`` names its option)."""
    if ok is None:
        return "n/a on CPU" if device.type == "cpu" else f"n/a (unknown peak: {missing})"
    word = "met" if ok else "not met"
    return word if device.type == "cuda" else f"n/a on CPU ({word} at this size)"


def number(value: float) -> str:
    """Three significant digits, for values from a tiny CPU run to bart.large on a GPU."""
    return f"{value:.3g}"


def unless_oom(measure: Callable[[], T], device: torch.device) -> Optional[T]:
    """``measure()``, or None when CUDA runs out of memory; the memory is released either way."""
    try:
        return measure()
    except torch.cuda.OutOfMemoryError:
        return None
    finally:
        free_memory(device)


# ---- which attention kernels ran -------------------------------------------------------------


def attention_role(name: str) -> str:
    if "encoder_attn" in name:
        return "cross-attention"
    return "encoder self-attention" if name.startswith("encoder.") else "decoder self-attention"


class AttentionKernels(TorchDispatchMode):
    """Records the attention aten ops (fused SDPA kernels, or bmm of the unfused path) that run
    inside each of a model's attention modules, by role (encoder self-, decoder self-,
    cross-attention), in the forward passes (and checkpointing's recomputations) of a call."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.modules = {module: attention_role(name) for name, module in model.named_modules()
                        if isinstance(module, MultiheadAttention)}
        self.seen: Dict[str, Set[str]] = defaultdict(set)
        self.role: Optional[str] = None
        self.hooks: List = []

    def __enter__(self):
        for module, role in self.modules.items():
            self.hooks.append(module.register_forward_pre_hook(lambda m, a, role=role: setattr(self, "role", role)))
            self.hooks.append(module.register_forward_hook(lambda m, a, out: setattr(self, "role", None)))
        return super().__enter__()

    def __exit__(self, *exc):
        for hook in self.hooks:
            hook.remove()
        self.hooks.clear()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if self.role is not None and ("scaled_dot_product" in name or name in ("bmm", "baddbmm")):
            self.seen[self.role].add(KERNEL_NAMES.get(name, name))
        return func(*args, **(kwargs or {}))

    def describe(self) -> str:
        return "; ".join(f"{role}: {', '.join(sorted(kernels))}" for role, kernels in sorted(self.seen.items()))


# ---- training with fairseq's bf16 optimizer ----------------------------------------------------


def build_trainable(size: ModelSize, page_len: int, device: torch.device, dtype: torch.dtype, *flags: str):
    """(dictionary, model, optimizer): PageSum of ``size`` in ``dtype``, in training mode, and
    the optimizer fairseq-train builds for ``--bf16 --optimizer adam``: ``FP16Optimizer`` (fp32
    master weights and gradients) around ``FairseqAdam``. ``common.build_model`` keeps
    fairseq's parsed options to itself; the optimizer is built from them."""
    with tempfile.TemporaryDirectory() as data_dir:
        builder.dictionary_directory(make_dictionary(size), data_dir)
        fairseq_args, task, model = builder.build_model(
            data_dir, "pagesum_bart_large", "--dropout", "0.1", *size.arch_args(), "--max-source-positions",
            str(page_len), "--bf16", "--optimizer", "adam", "--lr", "1e-4", *flags)
    model.to(device=device, dtype=dtype).train()
    logging.getLogger("hydra").setLevel(logging.WARNING)  # fairseq composes its config with hydra
    with warnings.catch_warnings():  # hydra's deprecation notices
        warnings.simplefilter("ignore")
        cfg = convert_namespace_to_omegaconf(fairseq_args)
    optimizer = FP16Optimizer.build_optimizer(cfg, [p for p in model.parameters() if p.requires_grad])
    return task.dictionary, model, optimizer


def update_step(model, optimizer, src_tokens, target, prev_output_tokens, pad: int) -> Callable[[], None]:
    """One update as fairseq's trainer makes it: zero the gradients, forward, label-smoothed
    loss, backward through the optimizer, step. src_tokens (batch, pages, page_len); target
    and prev_output_tokens (batch, tgt_len)."""

    def step():
        optimizer.zero_grad()
        logits, _ = model(src_tokens, None, prev_output_tokens)  # (batch, tgt_len, vocab)
        optimizer.backward(label_smoothed_loss(logits, target, pad))
        optimizer.step()

    return step


def measure_update(step: Callable[[], None], model, optimizer, device: torch.device, repeats: int,
                   kernels: Optional[AttentionKernels] = None) -> Optional[Tuple[PeakMemory, float]]:
    """(peak memory of one update, with what was held before it; fastest of ``repeats``
    updates) after a warm-up update (under ``kernels`` if given), which creates Adam's state.
    ``common.measure_step`` reports only the memory a step adds, and its CPU tracker would not
    see the optimizer's master copy: here the model, the master weights and gradients and
    Adam's moments are all tracked. None when CUDA runs out of memory."""
    try:
        with kernels or contextlib.nullcontext():
            step()
        seconds = best_seconds(step, device, repeats, warmup=0)
        optimizer.zero_grad()  # held before an update: weights, master weights and gradients, Adam's moments
        masters = optimizer.fp32_params  # a list: fairseq does not flatten bf16 master weights
        peak = peak_memory(step, device, [model, optimizer.optimizer, *masters, *(p.grad for p in masters)])
    except torch.cuda.OutOfMemoryError:
        return None
    finally:
        optimizer.zero_grad()
        free_memory(device)
    return peak, seconds


def optimizer_bytes(model, optimizer) -> Dict[str, int]:
    """What an update starts from, by kind; a storage counts once, under its first kind (an
    fp32 model's master weights are its own weights: ``p.float()`` does not copy)."""
    masters = optimizer.fp32_params
    moments = [t for state in optimizer.optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    kinds = {"weights": list(model.parameters()), "fp32 master": masters,
             "fp32 gradients": [p.grad for p in masters], "Adam moments": moments}
    held, counted = {}, []
    for kind, tensors in kinds.items():
        before = tensor_bytes(counted)
        counted += tensors
        held[kind] = tensor_bytes(counted) - before
    return held


def training_batch(dictionary, batch: int, pages: int, page_len: int, tgt_len: int, seed: int, device):
    """(src_tokens (batch, pages, page_len), target, prev_output_tokens (batch, tgt_len)) on device."""
    generator = torch.Generator().manual_seed(seed)
    src_tokens = paged_source(dictionary, batch, pages, page_len, generator)
    target, prev_output_tokens = summary_io(dictionary, batch, tgt_len, generator)
    return src_tokens.to(device), target.to(device), prev_output_tokens.to(device)


# ---- row 1: training peak memory ------------------------------------------------------------


def training_memory(args, size: ModelSize, device, dtype) -> Tuple[str, str, str]:
    """(the kernels that ran, caption, table)."""
    dictionary, model, optimizer = build_trainable(size, args.page_len, device, dtype, "--checkpoint-activations")
    inputs = training_batch(dictionary, 1, args.pages, args.page_len, args.tgt_len, args.seed, device)
    kernels = AttentionKernels(model)
    measured = measure_update(update_step(model, optimizer, *inputs, dictionary.pad()), model, optimizer, device,
                              args.repeats, kernels)
    held = optimizer_bytes(model, optimizer)
    print(f"row 1: {args.pages} pages: {measured}", file=sys.stderr, flush=True)
    goal = f"<= {MEMORY_GOAL / GB:.0f} GB (AWESOME paper: HF PageSum 24.9 GB)"
    row = [args.pages, args.pages * args.page_len, args.tgt_len]
    if measured is None:
        row += ["OOM"] * 4 + [goal, verdict(False, device)]
    else:
        peak, seconds = measured
        row += [number(peak.before / GB), number(peak.peak / GB), number((peak.peak - peak.before) / GB),
                number(seconds), goal, verdict(peak.peak <= MEMORY_GOAL, device)]
    caption = (
        f"Row 1, training peak memory: PageSum, batch 1, {dtype_name(dtype)} model, activation "
        f"checkpointing (fairseq's checkpoint_wrapper on every layer), one update: forward, loss, backward, "
        f"{type(optimizer).__name__} ({type(optimizer.optimizer).__name__}) step. Held before the update: "
        + ", ".join(f"{name} {number(value / GB)} GB" for name, value in held.items())
        + f". GB = 10^9 bytes; update s: best of {args.repeats}."
    )
    header = ["pages", "source tokens", "summary tokens", "held GB", "peak GB", "added by update GB", "update s",
              "goal", "verdict"]
    del model, optimizer
    free_memory(device)
    return kernels.describe(), caption, markdown_table(header, [row])


# ---- row 2: memory growth, PageSum against full attention -----------------------------------


def memory_growth(args, device, dtype) -> Tuple[str, str]:
    settings = argparse.Namespace(pages=args.growth_pages, page_len=args.page_len, tgt_len=args.growth_tgt_len,
                                  repeats=args.repeats, seed=args.seed)
    dictionary, models, size = memory_scaling.build_pair(settings, device, dtype)
    table = []
    for kernel in ("fused", "math"):
        with sdpa_kernel(ATTENTION_KERNELS[kernel]):
            rows = memory_scaling.measure(settings, dictionary, models, device)
        table += growth_rows(kernel, rows)
    del models
    free_memory(device)
    caption = (
        f"Row 2, training peak memory growth: benchmarks.memory_scaling's step (forward + backward, no checkpointing, "
        f"no optimizer) of PageSum and of full-attention BART (positions extended to "
        f"{max(args.growth_pages) * args.page_len}), {size.layers}+{size.layers} layers, d={size.embed_dim}, "
        f"{dtype_name(dtype)}, pages of {args.page_len} tokens, {args.growth_tgt_len}-token summary, "
        f"batch 1. Peak MB on top of the weights; growth: against {args.growth_pages[0]} page(s). Attention: fused "
        f"(SDPA kernels allowed) and math (score matrices stored, as BART's original attention)."
    )
    header = ["attention", "pages", "tokens", "linear growth", "PageSum peak MB", "PageSum growth", "BART peak MB",
              "BART growth", "goal", "verdict"]
    return caption, markdown_table(header, table)


def growth_rows(kernel: str, rows: List[Dict]) -> List[List[object]]:
    """Table rows of one kernel setting from ``memory_scaling.measure``'s results."""
    first = rows[0]
    goal = f"PageSum growth <= {LINEAR_SLACK} x linear; where BART stops"
    table = []
    for row in rows:
        ratio = row["pages"] / first["pages"]
        cells = [kernel, row["pages"], row["tokens"], f"{ratio:.0f}x"]
        growth = {}
        for name in memory_scaling.MODELS:
            value, base = row[name], first[name]
            growth[name] = None if value is None or base is None else value["mb"] / base["mb"]
            cells += ["OOM" if value is None else f"{value['mb']:.0f}",
                      "-" if growth[name] is None else f"{growth[name]:.2f}x"]
        if growth["PageSum"] is None:
            pagesum = "not met (PageSum OOM)"
        else:
            pagesum = "met (linear)" if growth["PageSum"] <= LINEAR_SLACK * ratio else "not met (super-linear)"
        bart = "BART stops (OOM)" if row["BART"] is None else "BART runs"
        table.append(cells + [goal, f"{pagesum}; {bart}"])
    return table


# ---- row 3: training throughput and model FLOP utilization --------------------------------


def matmul_weights(model: nn.Module) -> Dict[str, int]:
    """The model's linear weights by the tokens they multiply: ``encoder`` (source tokens),
    ``cross_kv`` (the cross-attention key/value projections: source tokens, once per page),
    ``decoder`` (summary tokens, once per page), ``output`` (summary tokens, after mixing)."""
    counts = {"encoder": 0, "cross_kv": 0, "decoder": 0, "output": 0}
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        if name.startswith("encoder."):
            counts["encoder"] += module.weight.numel()
        elif name == "decoder.output_projection":
            counts["output"] += module.weight.numel()
        elif re.search(r"encoder_attn\.[kv]_proj$", name):
            counts["cross_kv"] += module.weight.numel()
        else:
            counts["decoder"] += module.weight.numel()
    return counts


def training_flops(model: nn.Module, batch: int, pages: int, page_len: int, tgt_len: int) -> Tuple[float, str]:
    """(model FLOPs of one training update, the formula with the model's numbers)."""
    n = matmul_weights(model)
    layers_enc, layers_dec = len(model.encoder.layers), len(model.decoder.layers)
    d = model.encoder.embed_tokens.embedding_dim
    b, p, s, t = batch, pages, page_len, tgt_len
    flops = 6 * ((n["encoder"] + n["cross_kv"]) * b * p * s + n["decoder"] * b * p * t + n["output"] * b * t
                 + 2 * d * b * p * (layers_enc * s * s + layers_dec * (t * t + t * s)))
    formula = (
        "FLOPs = 6 x [(N_enc + N_kv) B P S + N_dec B P T + N_out B T + 2 d B P (L_enc S^2 + L_dec (T^2 + T S))], "
        f"N_enc = {number(n['encoder'] / 1e6)}M, N_kv = {number(n['cross_kv'] / 1e6)}M, "
        f"N_dec = {number(n['decoder'] / 1e6)}M, N_out = {number(n['output'] / 1e6)}M, L_enc = {layers_enc}, "
        f"L_dec = {layers_dec}, d = {d}, P = {p}, S = {s}, T = {t}"
    )
    return flops, formula


def training_throughput(args, size: ModelSize, device, dtype, peak_flops: Optional[float]) -> Tuple[str, str]:
    dictionary, model, optimizer = build_trainable(size, args.page_len, device, dtype)
    goal = f"MFU >= {MFU_GOAL:.0%} at the largest batch"
    _, formula = training_flops(model, 1, args.mfu_pages, args.page_len, args.tgt_len)
    rows, largest = [], None
    batch = 1
    while batch <= args.max_batch:
        inputs = training_batch(dictionary, batch, args.mfu_pages, args.page_len, args.tgt_len, args.seed, device)
        measured = measure_update(update_step(model, optimizer, *inputs, dictionary.pad()), model, optimizer, device,
                                  args.repeats)
        del inputs
        print(f"row 3: batch {batch}: {measured}", file=sys.stderr, flush=True)
        if measured is None:
            rows.append([batch, batch * args.mfu_pages * args.page_len] + ["OOM"] * 5 + [goal, "-"])
            break
        peak, seconds = measured
        flops, _ = training_flops(model, batch, args.mfu_pages, args.page_len, args.tgt_len)
        mfu = flops / seconds / peak_flops if peak_flops else None
        rows.append([batch, batch * args.mfu_pages * args.page_len, number(seconds), number(flops / 1e12),
                     number(flops / seconds / 1e12), "-" if mfu is None else f"{mfu:.1%}", number(peak.peak / GB),
                     goal, "-"])
        largest = (len(rows) - 1, mfu)
        batch *= 2
    if largest is None:
        rows[-1][-1] = verdict(False, device)  # not even batch 1 fits
    else:
        index, mfu = largest
        rows[index][-1] = verdict(None if mfu is None else mfu >= MFU_GOAL, device, "--peak-tflops")
    stop = "the first OOM" if rows[-1][2] == "OOM" else f"--max-batch {args.max_batch}"
    caption = (
        f"Row 3, training throughput: PageSum, {args.mfu_pages} pages of {args.page_len} tokens, {args.tgt_len}-token "
        f"summary, {dtype_name(dtype)}, no checkpointing, the update of row 1; batches doubled up to "
        f"{stop}. {formula}. MFU = FLOPs / update s / "
        + (f"{number(peak_flops / 1e12)} TFLOP/s." if peak_flops else "peak (unknown here).")
        + f" Update s: best of {args.repeats}; peak GB: everything held at the peak, optimizer included."
    )
    header = ["batch", "source tokens", "update s", "TFLOP/update", "TFLOP/s", "MFU", "peak GB", "goal", "verdict"]
    del model, optimizer
    free_memory(device)
    return caption, markdown_table(header, rows)


# ---- row 4: decoding throughput, beam sharing and the bandwidth bound -------------------------


def step_bytes(model: nn.Module, batch: int, beam: int, pages: int, page_len: int, length: float,
               shared: bool) -> Dict[str, float]:
    """Bytes one decoding step must read, by kind, with a self-attention cache of ``length``
    positions (see the module docstring)."""
    element = next(model.parameters()).element_size()
    weights = sum(p.numel() * p.element_size() for name, p in model.decoder.named_parameters()
                  if not re.search(r"encoder_attn\.[kv]_proj\.|^embed_positions\.", name))
    layers, d = len(model.decoder.layers), model.decoder.embed_dim
    copies = 1 if shared else beam
    return {"weights": weights, "cross k/v": layers * 2 * batch * copies * pages * page_len * d * element,
            "self cache": layers * 2 * batch * beam * pages * length * d * element}


def timed_search(model, dictionary, sample, beam: int, out_len: int, shared: bool, repeats: int,
                 device) -> Tuple[float, float, int]:
    """(seconds of the whole search, mean seconds per step, decoder calls) of the fastest of
    ``repeats`` searches of exactly ``out_len`` summary tokens, after a two-token warm-up."""
    generator_for(model, dictionary, beam, 2, shared).generate([model], sample)
    generator = generator_for(model, dictionary, beam, out_len, shared)
    best = None
    for _ in range(repeats):
        with DecoderCalls(model, device) as calls:
            synchronize(device)
            start = time.perf_counter()
            hypos = generator.generate([model], sample)
            synchronize(device)
            seconds = time.perf_counter() - start
        assert {len(h[0]["tokens"]) for h in hypos} == {out_len + 2}, "<s>, the forced length, </s>"
        steps = calls.step_seconds()
        if best is None or seconds < best[0]:
            best = (seconds, sum(steps) / len(steps), len(calls.starts))
    return best


def build_decoder_model(args, size: ModelSize, device, dtype):
    torch.manual_seed(args.seed)
    task, model = build_model("pagesum_bart_large", size, "--max-source-positions", str(args.page_len),
                              "--max-target-positions", str(max(args.out_lens) + 2), dropout=0.0)
    return task.dictionary, model.to(device=device, dtype=dtype).eval()


def decoding_samples(args, dictionary, device) -> Dict[int, Dict]:
    """batch -> the generator's sample of ``batch`` random documents of ``--decode-pages`` pages."""
    generator = torch.Generator().manual_seed(args.seed)
    return {batch: net_input(paged_source(dictionary, batch, args.decode_pages, args.page_len, generator).to(device),
                             dictionary.pad())
            for batch in args.batches}


def decoding_throughput(args, model, dictionary, samples, device, dtype,
                        bandwidth: Optional[float]) -> Tuple[str, str]:
    kernels = AttentionKernels(model)
    with kernels:
        generator_for(model, dictionary, args.beam, 2, True).generate([model], samples[args.batches[0]])
    goal = f"shared >= {SHARING_GOAL:.0f}x per beam; step <= {BANDWIDTH_GOAL:.0f}x bound"
    rows = []
    for out_len in args.out_lens:
        for batch, sample in samples.items():
            rates = {}
            for shared in (False, True):
                layout = "shared" if shared else "per beam"
                result = unless_oom(lambda: timed_search(model, dictionary, sample, args.beam, out_len, shared,
                                                         args.repeats, device), device)
                if result is None:
                    rates[shared] = None
                    rows.append([out_len, batch, layout] + ["OOM"] * 6 + [goal if shared else "(before sharing)",
                                                                         verdict(False, device) if shared else "-"])
                    continue
                seconds, step, calls = result
                rates[shared] = batch * args.beam * out_len / seconds
                read = sum(step_bytes(model, batch, args.beam, args.decode_pages, args.page_len, (calls + 1) / 2,
                                      shared).values())
                bound = read / bandwidth if bandwidth else None
                cells = [out_len, batch, layout, f"{rates[shared]:.0f}", number(step * 1e3), number(read / 1e6)]
                cells += ["-", "-"] if bound is None else [number(bound * 1e3), f"{step / bound:.1f}x"]
                if not shared:
                    rows.append(cells + ["1.00x", "(before sharing)", "-"])
                    continue
                near_bound = verdict(None if bound is None else step <= BANDWIDTH_GOAL * bound, device,
                                     "--peak-bandwidth")
                if rates[False] is None:  # only the shared layout fits
                    speedup, sharing = "-", verdict(True, device) + " (per beam OOM)"
                else:
                    speedup = f"{rates[True] / rates[False]:.2f}x"
                    sharing = verdict(rates[True] / rates[False] >= SHARING_GOAL, device)
                rows.append(cells + [speedup, goal, f"sharing: {sharing}; bound: {near_bound}"])
            print(f"row 4: {out_len} tokens, batch {batch}: tokens/s {rates}", file=sys.stderr, flush=True)
    caption = (
        f"Row 4, decoding throughput: beam {args.beam}, {args.decode_pages} pages of {args.page_len} tokens, summaries "
        f"of exactly the given length, {dtype_name(dtype)}; pages shared by an example's beams vs one "
        f"copy per beam (before beam sharing). tokens/s = batch x beam x summary tokens / search s; ms/step: mean "
        f"interval between decoder calls; MB/step: 10^6 bytes one step must read (decoder weights, cross-attention "
        f"keys and values, the self-attention cache at its mean length); bound = MB/step / "
        + (f"{number(bandwidth / 1e12)} TB/s." if bandwidth else "bandwidth (unknown here).")
        + f" Best of {args.repeats} searches. Attention kernels in decoding: {kernels.describe()}."
    )
    header = ["summary tokens", "batch", "layout", "tokens/s", "ms/step", "MB/step", "bound ms", "step / bound",
              "speed-up", "goal", "verdict"]
    return caption, markdown_table(header, rows)


# ---- row 5: page pruning --------------------------------------------------------------------


def page_pruning(args, model, dictionary, samples, device) -> Tuple[str, str]:
    goal = f">= {PRUNING_GOAL:.0f}x all pages"
    rows = []
    for out_len in args.out_lens:
        settings = argparse.Namespace(out_len=out_len, repeats=args.repeats)
        for batch, sample in samples.items():
            rates = {}  # top_pages (0: all) -> (summaries/s, decoder tokens/s), None on OOM
            for top_pages in (0, args.top_pages):
                rates[top_pages] = unless_oom(
                    lambda: decoding_rate(model, dictionary, sample, args.beam, top_pages, settings, device), device)
            full, pruned = rates[0], rates[args.top_pages]
            speedup = None if full is None or pruned is None else pruned[0] / full[0]
            for top_pages, rate in rates.items():
                cells = [out_len, batch, f"{top_pages} of {args.decode_pages}" if top_pages else "all"]
                cells += ["OOM", "OOM"] if rate is None else [f"{rate[0]:.2f}", f"{rate[1]:.0f}"]
                if not top_pages:
                    rows.append(cells + ["-" if rate is None else "1.00x", goal, "-"])
                elif speedup is None:
                    rows.append(cells + ["-", goal, "n/a (OOM)"])
                else:
                    rows.append(cells + [f"{speedup:.2f}x", goal, verdict(speedup >= PRUNING_GOAL, device)])
            print(f"row 5: {out_len} tokens, batch {batch}: {rates}", file=sys.stderr, flush=True)
    caption = (
        f"Row 5, page pruning: generation_speed.decoding_rate, beam {args.beam}, {args.decode_pages} pages of "
        f"{args.page_len} tokens, the {args.top_pages} most confident pages (scoring pass included) against all, "
        f"pages shared by the beams, best of {args.repeats}."
    )
    header = ["summary tokens", "batch", "pages decoded", "summaries/s", "decoder tokens/s", "speed-up", "goal",
              "verdict"]
    return caption, markdown_table(header, rows)


def pruning_fidelity(args, device) -> Tuple[str, str]:
    settings = argparse.Namespace(seed=args.seed, beams=[args.beam], train_updates=args.train_updates,
                                  fidelity_docs=args.fidelity_docs)
    caption, rows = fidelity_rows(settings, device)
    own_size = f"{FIDELITY_TASK['n_pages']} pages x {FIDELITY_TASK['page_len']} tokens"
    goal = f"fidelity at {args.decode_pages} x {args.page_len}"
    rows = [row + [goal, f"not met: pagesum_tiny on {own_size}"] for row in rows]
    header = ["summary drawn from pages", "full decoding = reference", "beam", "pages kept", "pruned differs", "goal",
              "verdict"]
    caption = (f"Row 5, {caption[0].lower()}{caption[1:]} Run at generation_speed's own size, not at "
               f"{args.decode_pages} x {args.page_len}: random weights have no page preference to keep.")
    return caption, markdown_table(header, rows)


def main(argv=None):
    args = parse_args(argv)
    device, dtype = start(args)
    size = BART_LARGE if device.type == "cuda" else CPU_TINY
    peak_flops, bandwidth, peak_source = gpu_peaks(args, device)
    command = "python -m benchmarks.scale " + shlex.join(sys.argv[1:] if argv is None else argv)
    show = dict(sep="\n\n", end="\n\n", flush=True)

    with sdpa_kernel(ATTENTION_KERNELS["fused"]):  # row 2 also runs under "math", in its own context
        training_kernels, *row1 = training_memory(args, size, device, dtype)
        cuda = f", CUDA {torch.version.cuda}" if device.type == "cuda" else ""
        peaks = (f"bf16 peak {number(peak_flops / 1e12)} TFLOP/s" if peak_flops else "bf16 peak unknown") + ", " + (
            f"bandwidth {number(bandwidth / 1e12)} TB/s" if bandwidth else "bandwidth unknown")
        setup = (
            f"Command: `{command}`. Machine: {describe_device(device)}{cuda}, fairseq {fairseq.__version__}, "
            f"Python {platform.python_version()}. Model: {size.layers}+{size.layers} layers, d={size.embed_dim}, "
            f"ffn={size.ffn_dim}, {size.heads} heads, random weights, {dtype_name(dtype)}. Peaks: "
            f"{peaks} ({peak_source}). Attention: SDPA with fused kernels allowed; kernels that ran in a training "
            f"step: {training_kernels}."
        )
        print(setup, *row1, **show)
        print(*memory_growth(args, device, dtype), **show)
        print(*training_throughput(args, size, device, dtype, peak_flops), **show)
        dictionary, model = build_decoder_model(args, size, device, dtype)
        samples = decoding_samples(args, dictionary, device)
        print(*decoding_throughput(args, model, dictionary, samples, device, dtype, bandwidth), **show)
        print(*page_pruning(args, model, dictionary, samples, device), **show)
        del model, samples
        free_memory(device)
        print(*pruning_fidelity(args, device), sep="\n\n", flush=True)


if __name__ == "__main__":
    main()
