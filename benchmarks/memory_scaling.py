"""Peak memory and time of one training step as the input grows: PageSum vs full attention.

For every page count n (1, 2, 4, 8, 16 by default) the script runs one training step
(forward, label-smoothed cross entropy, backward) of

* **PageSum** on ``n`` pages of ``page_len`` tokens, input (1, n, page_len): every page
  is encoded on its own, and the decoder runs once per page;
* **full-attention BART** of the same size on the same tokens concatenated into one
  sequence of ``n * page_len`` tokens, its learned positions extended to that length
  (fresh position embeddings: cost does not depend on their values). It is built as the
  plugin's ``hepos`` model with full encoder and full cross-attention, which is BART
  (``tests/test_hepos_model.py``) with every attention, cross-attention included, through
  SDPA, so that both models run their best fused kernels.

Both decode the same summary of ``--tgt-len`` tokens. Weights are random: memory and
time do not depend on them.

What is measured
* ``peak MB``: the most tensor memory the step holds at once *on top of* the model's
  weights (activations kept for backward, gradients, temporaries). On CUDA this is
  ``torch.cuda.max_memory_allocated`` minus the memory allocated before the step. On
  CPU, where torch keeps no allocator statistics, torch's ``MemTracker`` follows every
  tensor storage that an operator creates and sums the live ones (see
  ``common.peak_step_bytes``); process RSS was not used because the C allocator keeps
  freed memory and it counts the Python runtime and libraries.
* ``step s``: the fastest of ``--repeats`` timed steps after one warm-up (CUDA:
  between ``torch.cuda.synchronize`` calls), measured without the tracker.
* growth ratios: each value divided by its value at the smallest page count. Linear
  growth doubles when the pages double; quadratic growth quadruples.

Sizes: on CPU the ``bart.base`` dimensions (6+6 layers, d=768, 12 heads, ~50k vocabulary)
in fp32 with pages of 512 tokens (``--size small``: 2+2 layers, d=256, pages of 256); on
CUDA the ``bart.large`` dimensions (12+12 layers, d=1024, 16 heads) in bf16 with pages of
1024 tokens.

Today's attention against the fused one. A second table runs PageSum at ``--compare-pages``
pages (7) with a summary of ``--compare-tgt-len`` tokens (512) twice, taking turns: with
the attention of before (``reference_attention``: cross-attention as fairseq's bmm +
softmax, its score matrix kept in fp32 for backward) and with fused attention. A configuration that runs out of GPU memory is reported as
OOM, and its model is not tried on more pages.

Attention kernels (``--attention``). fairseq's attention calls
``F.scaled_dot_product_attention`` whenever no attention weights are requested.
``math`` restricts it to the reference kernel, which materialises the (heads, length,
length) score matrix and keeps it for backward, as BART's original attention does;
``fused`` (default) lets torch pick a fused kernel (flash / memory-efficient) that never
stores that matrix: its time is still quadratic in the length, its memory is not. Both
models run under the same setting.

    python -m benchmarks.memory_scaling --device cpu
    python -m benchmarks.memory_scaling --device cpu --attention math --size small
    python -m benchmarks.memory_scaling --device cuda
"""

import argparse
import sys
from typing import Dict, List, Optional

import torch
from torch.nn.attention import sdpa_kernel

from benchmarks import memory_plan
from benchmarks.common import (
    ATTENTION_KERNELS,
    BART_BASE,
    BART_LARGE,
    CPU_SMALL,
    ModelSize,
    add_device_args,
    build_model,
    describe_device,
    dtype_name,
    markdown_table,
    measure_step,
    paged_source,
    start,
    summary_io,
    training_step,
)
from benchmarks.reference.modules import reference_attention

MODELS = ("PageSum", "BART")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--pages", type=int, nargs="+", help="page counts (default: 1 2 4 8 16; --quick: 1 2 4)")
    parser.add_argument("--page-len", type=int, help="tokens per page (default: 256 on CPU, 1024 on CUDA)")
    parser.add_argument("--tgt-len", type=int, help="summary tokens (default: 64 on CPU, 256 on CUDA)")
    parser.add_argument("--repeats", type=int, help="timed steps per configuration (default: 3, --quick: 1)")
    parser.add_argument(
        "--attention",
        choices=ATTENTION_KERNELS,
        default="fused",
        help="math: the score matrix is materialised (as in BART's original attention); "
        "fused: flash / memory-efficient kernels (default)",
    )
    parser.add_argument("--size", choices=("base", "small"), default="base",
                        help="CPU dimensions: bart.base (default) or 2+2 layers of d=256")
    parser.add_argument("--compare-pages", type=int, help="pages of the today-against-fused table (default: 7)")
    parser.add_argument("--compare-tgt-len", type=int, help="summary tokens of that table (default: 512)")
    args = parser.parse_args(argv)
    on_cuda = args.device == "cuda"
    args.pages = args.pages or ([1, 2, 4] if args.quick else [1, 2, 4, 8, 16])
    args.page_len = args.page_len or (1024 if on_cuda else (128 if args.quick else (512 if args.size == "base" else 256)))
    args.compare_pages = args.compare_pages or (2 if args.quick else 7)
    args.compare_tgt_len = args.compare_tgt_len or (16 if args.quick else 512)
    args.tgt_len = args.tgt_len or (256 if on_cuda else 64)
    args.repeats = args.repeats or (1 if args.quick else 3)
    return args


def build_pair(args, device: torch.device, dtype: torch.dtype, size: Optional[ModelSize] = None,
               summary_tokens: int = 1024):
    """PageSum and full-attention BART of the same ``size`` (default: the device's); BART's
    positions cover all pages, PageSum's target positions ``summary_tokens`` (at least 1,024)."""
    size = size or (BART_LARGE if device.type == "cuda" else BART_BASE if args.size == "base" else CPU_SMALL)
    total = max(args.pages) * args.page_len
    torch.manual_seed(args.seed)
    task, pagesum = build_model("pagesum_bart_large", size, "--max-source-positions", str(args.page_len),
                                "--max-target-positions", str(max(1024, summary_tokens)))
    torch.manual_seed(args.seed)
    _, bart = build_model("hepos_bart_large", size, "--max-source-positions", str(total), "--encoder-attention", "full",
                          "--cross-attention", "full")
    models = {"PageSum": pagesum, "BART": bart}
    for model in models.values():
        model.to(device=device, dtype=dtype).train()
    return task.dictionary, models, size


def measure(args, dictionary, models, device) -> List[Dict[str, Optional[float]]]:
    """One row per page count: each model's ``measure_step`` result, None when it ran out of
    memory. A model is not tried again after its first OOM (a longer input cannot fit): its
    later results are None too, and the row's ``tried`` says which were run."""
    generator = torch.Generator().manual_seed(args.seed)
    target, prev_output_tokens = (t.to(device) for t in summary_io(dictionary, 1, args.tgt_len, generator))
    rows, stopped = [], set()
    for n_pages in args.pages:
        paged = paged_source(dictionary, 1, n_pages, args.page_len, generator)  # (1, n, page_len)
        inputs = {"PageSum": paged.to(device), "BART": concatenated(paged).to(device)}
        row = {"pages": n_pages, "tokens": n_pages * args.page_len, "tried": {}}
        for name, model in models.items():
            row["tried"][name] = name not in stopped
            row[name] = None
            if name not in stopped:
                step = training_step(model, inputs[name], target, prev_output_tokens, dictionary.pad())
                row[name] = measure_step(step, device, args.repeats, [model])
                if row[name] is None:
                    stopped.add(name)
        rows.append(row)
        print(f"{n_pages} pages done", file=sys.stderr, flush=True)
    return rows


def concatenated(paged: torch.Tensor) -> torch.Tensor:
    """(1, n, page_len) pages -> (1, n * page_len): the same tokens as one document."""
    return paged.reshape(paged.size(0), -1)


def render(rows, args, size, vocab: int, device, dtype) -> str:
    first = rows[0]

    def cell(row, name, key, ratio=False):
        value, base = row[name], first[name]
        if value is None:
            return "OOM"
        if ratio:
            return "-" if base is None else f"{value[key] / base[key]:.2f}x"
        return f"{value[key]:.0f}" if key == "mb" else f"{value[key]:.3f}"

    header = ["pages", "tokens"] + [f"{m} {h}" for m in MODELS for h in ("peak MB", "step s")]
    absolute = [[r["pages"], r["tokens"]] + [cell(r, m, k) for m in MODELS for k in ("mb", "s")] for r in rows]
    ratio_header = ["pages", "linear", "quadratic"] + [f"{m} {h}" for m in MODELS for h in ("memory", "time")]
    scale = [r["pages"] / first["pages"] for r in rows]
    ratios = [
        [r["pages"], f"{s:.0f}x", f"{s * s:.0f}x"] + [cell(r, m, k, ratio=True) for m in MODELS for k in ("mb", "s")]
        for r, s in zip(rows, scale)
    ]
    setup = (
        f"Machine: {describe_device(device)}. Model: {size.layers}+{size.layers} layers, d={size.embed_dim}, "
        f"ffn={size.ffn_dim}, {size.heads} heads, vocab {vocab}, {dtype_name(dtype)}, "
        f"attention kernel: {args.attention}. Page length {args.page_len}, summary length {args.tgt_len}, "
        f"batch 1, step time: best of {args.repeats}."
    )
    return "\n\n".join(
        [
            setup,
            "One training step (forward + backward):",
            markdown_table(header, absolute),
            f"Growth relative to {first['pages']} page(s):",
            markdown_table(ratio_header, ratios),
        ]
    )


def before_against_now(args, dictionary, pagesum, device) -> str:
    """PageSum's training step on the path of before (``benchmarks/reference/modules.py``'s
    ``reference_attention``: every layer with a path of before on it) and on the default path, taking turns: peak MB and
    seconds of each, and their ratios."""
    generator = torch.Generator().manual_seed(args.seed + 1)
    target, prev_output_tokens = (t.to(device) for t in summary_io(dictionary, 1, args.compare_tgt_len, generator))
    src = paged_source(dictionary, 1, args.compare_pages, args.page_len, generator).to(device)
    step = training_step(pagesum, src, target, prev_output_tokens, dictionary.pad())
    results = {}
    for name in ("today", "fused", "today", "fused")[: 2 if args.quick else 4]:
        if name == "today":
            with reference_attention(pagesum):
                result = measure_step(step, device, args.repeats, [pagesum])
        else:
            result = measure_step(step, device, args.repeats, [pagesum])
        best = results.get(name)
        results[name] = result if best is None else {"mb": min(best["mb"], result["mb"]), "s": min(best["s"], result["s"])}
        print(f"{name} attention done", file=sys.stderr, flush=True)
    old, new = results["today"], results["fused"]
    rows = [["before (every reference path)", f"{old['mb']:.0f}", f"{old['s']:.2f}"],
            ["now (the default path)", f"{new['mb']:.0f}", f"{new['s']:.2f}"],
            ["now / before", f"{new['mb'] / old['mb']:.2f}x", f"{new['s'] / old['s']:.2f}x"]]
    return "\n\n".join([
        f"PageSum at {args.compare_pages} pages x {args.page_len} tokens, a {args.compare_tgt_len}-token summary, "
        f"the path of before against now (kernel setting: {args.attention}; runs taking turns, best of each):",
        markdown_table(["path", "peak MB", "step s"], rows)])


def main(argv=None):
    args = parse_args(argv)
    device, dtype = start(args)
    dictionary, models, size = build_pair(args, device, dtype, summary_tokens=args.compare_tgt_len)
    with sdpa_kernel(ATTENTION_KERNELS[args.attention]):
        rows = measure(args, dictionary, models, device)
        comparison = before_against_now(args, dictionary, models["PageSum"], device)
    print(render(rows, args, size, len(dictionary), device, dtype))
    print()
    print(comparison)
    print("\n" + memory_plan.report(device, args.repeats, args.quick))  # the memory model and the optimizer step


if __name__ == "__main__":
    main()
