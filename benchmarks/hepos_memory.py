"""Training memory and step time of HEPOS models as the input grows, against PageSum and full attention.

For every input length n (1K to 16K tokens by default) the script runs one training step
(forward, label-smoothed cross entropy, backward) of

* **HEPOS** with each encoder self-attention (``full``, ``window``, ``lsh``, ``sinkhorn``,
  at the paper's settings: w = 256, 4 rounds of 64-token buckets, 128-token blocks) in every
  layer (``--encoder-layout uniform``), and HEPOS encoder-decoder attention (stride 4), on one
  flat sequence of n tokens;
* **HEPOS, hybrid** (the default layout, the authors' model): LSH or Sinkhorn layers
  alternating with sliding-window layers;
* the Sinkhorn encoder with full encoder-decoder attention instead (``Sinkhorn, full
  cross``): what HEPOS itself saves;
* **PageSum** on the same tokens as spatial pages of ``--page-len`` tokens: every page is
  encoded on its own and the decoder runs once per page;
* **full attention** (fairseq's BART, full encoder and encoder-decoder attention) on the
  flat sequence, its learned positions extended to n.

All decode the same summary of ``--tgt-len`` tokens; weights are random (cost does not
depend on them). ``peak MB`` is the most tensor memory the step holds at once on top of
the weights: ``torch.cuda.max_memory_allocated`` on CUDA, torch's ``MemTracker`` on CPU
(see ``benchmarks.common.peak_step_bytes``). ``step s`` is the fastest of ``--repeats``
timed steps after a warm-up. Attention runs under torch's reference ("math") kernel unless
``--attention fused``: every model then materialises its score matrices, as BART does.
Models whose encoder attention is full (full attention and HEPOS+full) are skipped past
``--max-full-tokens``: their memory grows as n^2. Each row is also printed to stderr as
soon as it is measured.

    python -m benchmarks.hepos_memory --device cpu
    python -m benchmarks.hepos_memory --device cuda
"""

import argparse
import sys
from typing import Dict, List, Optional

import torch
from torch.nn.attention import sdpa_kernel

from benchmarks.common import (ATTENTION_KERNELS, LONG_INPUT_SIZES, build_model, describe_device, device_defaults,
                               dtype_name, markdown_table, measure_step, random_tokens, result_cell, start,
                               summary_io, training_step)

ENCODERS = ("full", "window", "lsh", "sinkhorn")
HYBRID = ("lsh", "sinkhorn")
MODELS = (tuple(f"HEPOS+{e}" for e in ENCODERS) + tuple(f"HEPOS+{e} (hybrid)" for e in HYBRID)
          + ("Sinkhorn, full cross", "PageSum", "Full attn"))
FULL_ENCODERS = ("HEPOS+full", "Full attn")  # quadratic in the input length


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384],
                        help="input lengths (default: 1K to 16K)")
    parser.add_argument("--page-len", type=int, help="PageSum page length (default: 1024 on CUDA, 512 on CPU)")
    parser.add_argument("--tgt-len", type=int, help="summary tokens (default: 512 on CUDA, 128 on CPU)")
    parser.add_argument("--max-full-tokens", type=int,
                        help="longest input for models with full encoder attention (default: 16384 on CUDA, "
                        "4096 on CPU)")
    parser.add_argument("--repeats", type=int, help="timed steps per configuration (default: 3 on CUDA, 1 on CPU)")
    parser.add_argument("--attention", choices=ATTENTION_KERNELS, default="math")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    return device_defaults(parser.parse_args(argv), page_len=(1024, 512), tgt_len=(512, 128),
                           max_full_tokens=(16384, 4096), repeats=(3, 1))


def model_settings(name: str, tokens: int, page_len: int):
    """(arch, extra flags, input layout) of a benchmarked model for an input of ``tokens``."""
    positions = ["--max-source-positions", str(tokens)]
    if name == "PageSum":
        return "pagesum_bart_large", ["--max-source-positions", str(page_len)], "pages"
    if name == "Full attn":
        return "bart_large", positions, "flat2d"
    if name == "Sinkhorn, full cross":
        return "hepos_bart_large", positions + ["--encoder-attention", "sinkhorn", "--encoder-layout", "uniform",
                                                "--cross-attention", "full"], "flat"
    encoder, _, hybrid = name.split("+")[1].partition(" ")
    layout = "hybrid" if hybrid else "uniform"
    return "hepos_bart_large", positions + ["--encoder-attention", encoder, "--encoder-layout", layout,
                                            "--cross-attention", "hepos"], "flat"


def source(dictionary, tokens: int, page_len: int, layout: str, generator) -> torch.Tensor:
    """Random words as the task lays them out: (1, 1, n) flat, (1, n / page_len, page_len)
    pages, (1, n) for fairseq's BART (flat2d)."""
    shape = (1, tokens // page_len, page_len) if layout == "pages" else (1, 1, tokens)
    src = random_tokens(dictionary, shape, generator)
    return src[:, 0] if layout == "flat2d" else src


def measure_one(name: str, tokens: int, args, device, dtype) -> Optional[Dict[str, float]]:
    arch, extra, layout = model_settings(name, tokens, args.page_len)
    torch.manual_seed(args.seed)
    task, model = build_model(arch, LONG_INPUT_SIZES[device.type], *extra)
    model.to(device=device, dtype=dtype).train()
    dictionary = task.dictionary
    generator = torch.Generator().manual_seed(args.seed)
    src = source(dictionary, tokens, args.page_len, layout, generator).to(device)
    target, prev = (t.to(device) for t in summary_io(dictionary, 1, args.tgt_len, generator))
    step = training_step(model, src, target, prev, dictionary.pad())
    return measure_step(step, device, args.repeats, [model])


def measure(args, device, dtype) -> List[Dict[str, object]]:
    rows = []
    for tokens in args.tokens:
        row: Dict[str, object] = {"tokens": tokens}
        for name in MODELS:
            if name in FULL_ENCODERS and tokens > args.max_full_tokens:
                row[name] = "skipped"
                continue
            row[name] = measure_one(name, tokens, args, device, dtype)
            print(f"{tokens} tokens: {name} {row[name]}", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def render(rows, args, device, dtype) -> str:
    def cell(value, key):
        return "—" if value == "skipped" else result_cell(value, key)

    header = ["input tokens"] + list(MODELS)
    memory = [[f"{r['tokens']:,}"] + [cell(r[m], "mb") for m in MODELS] for r in rows]
    time = [[f"{r['tokens']:,}"] + [cell(r[m], "s") for m in MODELS] for r in rows]
    size = LONG_INPUT_SIZES[device.type]
    setup = (
        f"Machine: {describe_device(device)}. Model: {size.layers}+{size.layers} layers, d={size.embed_dim}, "
        f"ffn={size.ffn_dim}, {size.heads} heads, vocab {size.vocab_words + 4}, {dtype_name(dtype)}, "
        f"attention kernel: {args.attention}. "
        f"Summary {args.tgt_len} tokens, batch 1; PageSum pages of {args.page_len} tokens; HEPOS stride 4, "
        f"window 256, LSH 4 x 64, Sinkhorn blocks of 128, in every layer or (hybrid) in every other layer, "
        f"the others windows; full encoder attention up to {args.max_full_tokens:,} "
        f"tokens (— past it). Step time: best of {args.repeats} after a warm-up step."
    )
    return "\n\n".join([setup, "Peak training-step memory above the weights (MB):", markdown_table(header, memory),
                        "Training step time (s):", markdown_table(header, time)])


def main(argv=None):
    args = parse_args(argv)
    device, dtype = start(args)
    with sdpa_kernel(ATTENTION_KERNELS[args.attention]):
        rows = measure(args, device, dtype)
    print(render(rows, args, device, dtype))


if __name__ == "__main__":
    main()
