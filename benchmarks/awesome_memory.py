"""Training memory of AWESOME as the document grows, against PageSum and HEPOS.

For every segment count n (2, 4, 8, 16 by default) the script runs one training step of

* **AWESOME (attentive)** and **AWESOME (compressive)** on n segments of ``--segment-len``
  tokens, exactly as the ``segmented_summarization`` task trains: segment after segment,
  each segment's loss back-propagated before the next runs, the memories (``--memory-slots``
  slots in every layer of this 2-layer model) carried with stopped gradients; the summary of
  ``--tgt-len`` tokens is split evenly over the segments' targets;
* **Se3** (AWESOME without memory): the same loop, for the cost of the memories themselves;
* **PageSum** on the same tokens as n pages, decoding the whole summary on every page;
* **HEPOS** (Sinkhorn encoder attention, blocks of 128, and HEPOS encoder-decoder attention,
  stride 4) on the same tokens as one flat sequence, decoding the whole summary once.

``peak MB`` is the most tensor memory a step holds at once on top of the weights, gradients
included: ``torch.cuda.max_memory_allocated`` on CUDA, torch's ``MemTracker`` on CPU (see
``benchmarks.common.peak_step_bytes``). Weights are random: memory does not depend on them.
Attention runs under torch's reference ("math") kernel, which materialises score matrices
as BART does. Each measurement is also printed to stderr as soon as it is made.

    python -m benchmarks.awesome_memory --device cpu
    python -m benchmarks.awesome_memory --device cuda
"""

import argparse
import gc
import logging
import os
import sys
import tempfile
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from fairseq import options, tasks
from fairseq.data import Dictionary
from torch.nn.attention import SDPBackend, sdpa_kernel

import pagesum_plugin  # noqa: F401  (registers the tasks and the models)
from benchmarks.common import best_seconds, describe_machine, markdown_table, peak_step_bytes
from pagesum_plugin.corpus.format import CorpusMeta
from pagesum_plugin.modules.memory import SegmentMemory

MODELS = ("AWESOME (attentive)", "AWESOME (compressive)", "Se3", "PageSum", "HEPOS")
# (embed dim, ffn dim, layers, heads, vocabulary words)
SIZES = {"cpu": (128, 512, 2, 4, 2000), "cuda": (1024, 4096, 12, 16, 50260)}


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
    args = parser.parse_args(argv)
    on_cuda = args.device == "cuda"
    args.segment_len = args.segment_len or (1024 if on_cuda else 256)
    args.tgt_len = args.tgt_len or (512 if on_cuda else 128)
    args.memory_slots = args.memory_slots or (1024 if on_cuda else 128)
    return args


def build(task_name: str, arch: str, device: str, dtype, *extra: str):
    """(task, model) for ``arch`` at the device's size, in training mode."""
    dim, ffn, layers, heads, words = SIZES[device]
    dims = ["--encoder-embed-dim", dim, "--decoder-embed-dim", dim, "--encoder-ffn-embed-dim", ffn,
            "--decoder-ffn-embed-dim", ffn, "--encoder-layers", layers, "--decoder-layers", layers,
            "--encoder-attention-heads", heads, "--decoder-attention-heads", heads]
    with tempfile.TemporaryDirectory() as data_dir:
        dictionary = Dictionary()
        for i in range(words):
            dictionary.add_symbol(f"w{i}")
        dictionary.pad_to_multiple_(8)
        dictionary.save(os.path.join(data_dir, "dict.txt"))
        CorpusMeta(tokenizer="none", dataset="synthetic", dictionary_size=len(dictionary)).save(data_dir)
        argv = [data_dir, "--task", task_name, "--arch", arch, "--dropout", "0.1", *map(str, dims), *extra]
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        task = tasks.setup_task(args)
        model = task.build_model(args)
    return task, model.to(device=device, dtype=dtype).train()


def model_settings(name: str, tokens: int, args):
    """(task, arch, extra flags) of a benchmarked model for an input of ``tokens``."""
    if name.startswith("AWESOME") or name == "Se3":
        memory = {"AWESOME (attentive)": "attentive", "AWESOME (compressive)": "compressive", "Se3": "none"}[name]
        return "segmented_summarization", "awesome_bart_large", [
            "--memory", memory, "--memory-slots", str(args.memory_slots),
            "--max-source-positions", str(args.segment_len)]
    if name == "PageSum":
        return "paged_summarization", "pagesum_bart_large", ["--max-source-positions", str(args.segment_len)]
    return "paged_summarization", "hepos_bart_large", [
        "--max-source-positions", str(tokens), "--encoder-attention", "sinkhorn", "--cross-attention", "hepos"]


def random_tokens(dictionary, shape, generator) -> torch.Tensor:
    """Random words ``<s> ... </s>`` along the last dimension."""
    tokens = torch.randint(dictionary.nspecial, len(dictionary), shape, generator=generator)
    tokens[..., 0], tokens[..., -1] = dictionary.bos(), dictionary.eos()
    return tokens


def cross_entropy(logits, target, pad: int):
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), target.reshape(-1), ignore_index=pad,
                           label_smoothing=0.1, reduction="sum")


def whole_document_step(model, src_tokens, target, pad: int):
    """PageSum and HEPOS: one forward pass over the whole document, one backward pass."""
    prev = torch.roll(target, 1, dims=1)  # </s> <s> summary

    def step():
        model.zero_grad(set_to_none=True)
        logits, _ = model(src_tokens, None, prev)
        cross_entropy(logits, target, pad).backward()

    return step


def segment_step(task, model, segments, targets, pad: int):
    """AWESOME: the task's own training step, segment by segment. ``step(before_segment)``
    calls ``before_segment`` (if given) before every segment's forward pass."""
    prev = torch.roll(targets, 1, dims=2)
    sample = {"id": torch.arange(1), "nsentences": 1, "ntokens": int(targets.ne(pad).sum()),
              "net_input": {"src_tokens": segments}, "segment_target": targets, "segment_prev_output_tokens": prev}

    class Backward:
        def backward(self, loss):
            loss.backward()

    def step(before_segment=None):
        def criterion(model, step_sample):
            if before_segment is not None:
                before_segment()
            logits, _ = model(**step_sample["net_input"])
            return cross_entropy(logits, step_sample["target"], pad), step_sample["ntokens"], {"sample_size": 1}

        model.zero_grad(set_to_none=True)
        task.train_step(sample, model, criterion, Backward(), 0)

    return step


def segment_peak_bytes(step, device: torch.device, model) -> int:
    """``common.peak_step_bytes`` for a step that runs the model once per segment. On CPU,
    MemTracker keeps per-module statistics that assume one forward pass per module and
    step; they are cleared before every segment, while the device-wide peak that is
    reported runs on across the whole step."""
    if device.type == "cuda":
        return peak_step_bytes(step, device, [model])
    from torch.distributed._tools.mem_tracker import MemTracker

    gc.collect()
    tracker = MemTracker()
    tracker.track_external(model)
    with tracker:
        before = tracker.get_tracker_snapshot("current").get(device, {}).get("Total", 0)
        step(tracker.reset_mod_stats)
    return tracker.get_tracker_snapshot("peak")[device]["Total"] - before


def measure_one(name: str, n: int, args, device, dtype) -> Optional[Dict[str, float]]:
    tokens = n * args.segment_len
    task_name, arch, extra = model_settings(name, tokens, args)
    torch.manual_seed(args.seed)
    task, model = build(task_name, arch, device.type, dtype, *extra)
    dictionary, pad = task.dictionary, task.dictionary.pad()
    generator = torch.Generator().manual_seed(args.seed)
    if task_name == "segmented_summarization":
        segments = random_tokens(dictionary, (1, n, args.segment_len), generator).to(device)
        per_segment = max(args.tgt_len // n, 3)  # <s> ... </s>
        targets = random_tokens(dictionary, (1, n, per_segment), generator).to(device)
        step = segment_step(task, model, segments, targets, pad)
    else:
        shape = (1, n, args.segment_len) if arch.startswith("pagesum") else (1, 1, tokens)
        source = random_tokens(dictionary, shape, generator).to(device)
        target = random_tokens(dictionary, (1, args.tgt_len), generator).to(device)
        step = whole_document_step(model, source, target, pad)
    try:
        seconds = best_seconds(step, device, args.repeats)
        model.zero_grad(set_to_none=True)
        if task_name == "segmented_summarization":
            peak = segment_peak_bytes(step, device, model)
        else:
            peak = peak_step_bytes(step, device, [model])
    except torch.cuda.OutOfMemoryError:
        return None
    finally:
        del model, step
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return {"mb": peak / 2**20, "s": seconds}


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
    def cell(value, key):
        if value is None:
            return "OOM"
        return f"{value[key]:.0f}" if key == "mb" else f"{value[key]:.2f}"

    header = ["segments", "input tokens"] + list(MODELS)
    memory = [[r["segments"], f"{r['tokens']:,}"] + [cell(r[m], "mb") for m in MODELS] for r in rows]
    time = [[r["segments"], f"{r['tokens']:,}"] + [cell(r[m], "s") for m in MODELS] for r in rows]
    first = rows[0]
    growth = [[r["segments"], f"{r['tokens'] / first['tokens']:.0f}x"]
              + [f"{r[m]['mb'] / first[m]['mb']:.2f}x" if r[m] and first[m] else "-" for m in MODELS] for r in rows]
    dim, ffn, layers, heads, words = SIZES[device.type]
    setup = (
        f"Machine: {describe_machine(device)}. Model: {layers}+{layers} layers, d={dim}, ffn={ffn}, {heads} heads, "
        f"vocab {words + 4}, {str(dtype).replace('torch.', '')}, attention kernel: math. Segments (and PageSum "
        f"pages) of {args.segment_len} tokens; summary {args.tgt_len} tokens (AWESOME: split over the segments); "
        f"AWESOME memory: {args.memory_slots} slots in all {layers} encoder and decoder layers; batch 1. "
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
    logging.getLogger("fairseq").setLevel(logging.WARNING)
    logging.getLogger("pagesum_plugin").setLevel(logging.WARNING)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device is visible to torch")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    with sdpa_kernel([SDPBackend.MATH]):
        rows = measure(args, device, dtype)
    print(render(rows, args, device, dtype))


if __name__ == "__main__":
    main()
