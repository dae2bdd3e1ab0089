"""Training memory of AWESOME as the document grows, against PageSum and HEPOS.

For every segment count n (2, 4, 8, 16 by default) the script runs one training step of

* **AWESOME (attentive)** and **AWESOME (compressive)** on n segments of ``--segment-len``
  tokens, exactly as the ``segmented_summarization`` task trains: segment after segment,
  each segment's loss back-propagated before the next runs, the memories (``--memory-slots``
  slots in every layer of this 2-layer model) carried with stopped gradients on the segment
  states and back-propagated through the write of the segment before (the default
  ``--memory-grad-segments 1``); the summary of ``--tgt-len`` tokens is split evenly over the
  segments' targets;
* **AWESOME (attentive, K=4)**: the same with a window of 4 writes (``--memory-grad-segments 4``):
  every segment from the fifth on replays the writes of the four before it;
* **Se3** (AWESOME without memory): the same loop, for the cost of the memories themselves;
* **PageSum** on the same tokens as n pages, decoding the whole summary on every page;
* **HEPOS** (the authors' layout: sliding-window (w = 256) and Sinkhorn (blocks of 128) encoder
  layers alternating, and HEPOS encoder-decoder attention, stride 4) on the same tokens as one
  flat sequence, decoding the whole summary once.

``peak MB`` is the most tensor memory a step holds at once on top of the weights, gradients
included: ``torch.cuda.max_memory_allocated`` on CUDA, torch's ``MemTracker`` on CPU (see
``benchmarks.common.peak_step_bytes``). Weights are random: memory does not depend on them.
Attention runs under torch's reference ("math") kernel, which materialises score matrices
as BART does. Each measurement is also printed to stderr as soon as it is made.

    python -m benchmarks.awesome_memory --device cpu
    python -m benchmarks.awesome_memory --device cuda
"""

import argparse
import sys
from typing import Dict, List, Optional

import torch
from torch.nn.attention import sdpa_kernel

from benchmarks.common import (ATTENTION_KERNELS, LONG_INPUT_SIZES, build_model, describe_device, device_defaults,
                               dtype_name, label_smoothed_loss, markdown_table, measure_step, random_tokens,
                               result_cell, start, summary_io, training_step)
from pagesum_plugin.systems.awesome.model import MEMORY_DEPTH

MODELS = ("AWESOME (attentive)", "AWESOME (attentive, K=4)", "AWESOME (compressive)", "Se3", "PageSum", "HEPOS")
MEMORY_FLAGS = {  # the segment-by-segment models
    "AWESOME (attentive)": ["--memory", "attentive"],
    "AWESOME (attentive, K=4)": ["--memory", "attentive", "--memory-grad-segments", "4"],
    "AWESOME (compressive)": ["--memory", "compressive"],
    "Se3": ["--memory", "none"],
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--segments", type=int, nargs="+", default=[2, 4, 8, 16], help="segment counts")
    parser.add_argument("--segment-len", type=int, help="tokens per segment (default: 1024 on CUDA, 256 on CPU)")
    parser.add_argument("--tgt-len", type=int, help="summary tokens (default: 512 on CUDA, 128 on CPU)")
    parser.add_argument("--memory-slots", type=int, help="memory slots per layer (default: 1024 on CUDA, 128 on CPU)")
    parser.add_argument("--repeats", type=int, default=1, help="timed steps per configuration")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    return device_defaults(parser.parse_args(argv), segment_len=(1024, 256), tgt_len=(512, 128),
                           memory_slots=(1024, 128))


def model_settings(name: str, tokens: int, args):
    """(task, arch, extra flags) of a benchmarked model for an input of ``tokens``."""
    if name in MEMORY_FLAGS:
        return "segmented_summarization", "awesome_bart_large", [
            *MEMORY_FLAGS[name], "--memory-slots", str(args.memory_slots),
            "--max-source-positions", str(args.segment_len)]
    if name == "PageSum":
        return "paged_summarization", "pagesum_bart_large", ["--max-source-positions", str(args.segment_len)]
    return "paged_summarization", "hepos_bart_large", [
        "--max-source-positions", str(tokens), "--encoder-attention", "sinkhorn", "--cross-attention", "hepos"]


def segment_step(task, model, segments, targets, pad: int):
    """AWESOME: the task's own training step, segment by segment, on segments
    (1, n, segment_len) and their targets (1, n, per_segment)."""
    prev = torch.roll(targets, 1, dims=2)  # </s> <s> summary, per segment
    sample = {"id": torch.arange(1), "nsentences": 1, "ntokens": int(targets.ne(pad).sum()),
              "net_input": {"src_tokens": segments}, "segment_target": targets, "segment_prev_output_tokens": prev}

    class Backward:
        def backward(self, loss):
            loss.backward()

    def step():
        def criterion(model, step_sample):
            logits, _ = model(**step_sample["net_input"])
            loss = label_smoothed_loss(logits, step_sample["target"], pad, reduction="sum")
            return loss, step_sample["ntokens"], {"sample_size": 1}

        model.zero_grad(set_to_none=True)
        task.train_step(sample, model, criterion, Backward(), 0)

    return step


def measure_one(name: str, n: int, args, device, dtype) -> Optional[Dict[str, float]]:
    tokens = n * args.segment_len
    task_name, arch, extra = model_settings(name, tokens, args)
    torch.manual_seed(args.seed)
    task, model = build_model(arch, LONG_INPUT_SIZES[device.type], *extra, task=task_name)
    model.to(device=device, dtype=dtype).train()
    dictionary, pad = task.dictionary, task.dictionary.pad()
    generator = torch.Generator().manual_seed(args.seed)
    if task_name == "segmented_summarization":
        segments = random_tokens(dictionary, (1, n, args.segment_len), generator).to(device)
        per_segment = max(args.tgt_len // n, 3)  # <s> ... </s>
        targets = random_tokens(dictionary, (1, n, per_segment), generator).to(device)
        step = segment_step(task, model, segments, targets, pad)
        # the model runs once per segment: MemTracker's per-module statistics restart at each
        return measure_step(step, device, args.repeats, [model], root=model)
    # PageSum and HEPOS: one forward pass over the whole document, one backward pass
    shape = (1, n, args.segment_len) if arch.startswith("pagesum") else (1, 1, tokens)
    source = random_tokens(dictionary, shape, generator).to(device)
    target, prev = (t.to(device) for t in summary_io(dictionary, 1, args.tgt_len, generator))
    step = training_step(model, source, target, prev, pad, reduction="sum")
    return measure_step(step, device, args.repeats, [model])


def measure(args, device, dtype) -> List[Dict[str, object]]:
    rows = []
    for n in args.segments:
        row: Dict[str, object] = {"segments": n, "tokens": n * args.segment_len}
        for name in MODELS:
            row[name] = measure_one(name, n, args, device, dtype)
            print(f"{n} segments: {name} {row[name]}", file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def render(rows, args, device, dtype) -> str:
    header = ["segments", "input tokens"] + list(MODELS)
    memory = [[r["segments"], f"{r['tokens']:,}"] + [result_cell(r[m], "mb") for m in MODELS] for r in rows]
    time = [[r["segments"], f"{r['tokens']:,}"] + [result_cell(r[m], "s") for m in MODELS] for r in rows]
    first = rows[0]
    growth = [[r["segments"], f"{r['tokens'] / first['tokens']:.0f}x"]
              + [f"{r[m]['mb'] / first[m]['mb']:.2f}x" if r[m] and first[m] else "-" for m in MODELS] for r in rows]
    size = LONG_INPUT_SIZES[device.type]
    setup = (
        f"Machine: {describe_device(device)}. Model: {size.layers}+{size.layers} layers, d={size.embed_dim}, "
        f"ffn={size.ffn_dim}, {size.heads} heads, vocab {size.vocab_words + 4}, {dtype_name(dtype)}, "
        f"attention kernel: math. Segments (and PageSum pages) of {args.segment_len} tokens; summary "
        f"{args.tgt_len} tokens (AWESOME: split over the segments); AWESOME memory: {args.memory_slots} slots in "
        f"{min(MEMORY_DEPTH, size.layers)} of the {size.layers} encoder and decoder layers (attentive: the last, "
        f"compressive: the first), back-propagated through 1 write (K=4: 4); HEPOS layers alternate window and "
        f"Sinkhorn; batch 1. "
        f"Step time: best of {args.repeats} after a warm-up step."
    )
    return "\n\n".join([
        setup,
        "Peak training-step memory above the weights (MB):", markdown_table(header, memory),
        f"Growth relative to {first['segments']} segments:",
        markdown_table(["segments", "input"] + list(MODELS), growth),
        "Training step time (s):", markdown_table(header, time),
    ])


def main(argv=None):
    args = parse_args(argv)
    device, dtype = start(args)
    with sdpa_kernel(ATTENTION_KERNELS["math"]):
        rows = measure(args, device, dtype)
    print(render(rows, args, device, dtype))


if __name__ == "__main__":
    main()
