"""AWESOME's training step, its segments' passes captured as CUDA graphs (``--capture-training``,
``systems/awesome/captured_segments.py``), against the task's eager step: the operators the host
launches, the loss and gradients, the time and, on CUDA, the peak memory.

A step is the task's: a batch's segments in order, each one's forward pass, the recipes' loss
(the plugin's criterion, ``LOSS_CHUNK_TOKENS`` summary tokens at a time) and backward, the
memory (``--memory``: attentive or compressive) carried from one segment to the next
(``--memory-grad-segments 1``). Half the documents of the batch have every segment and half one
fewer, so that the captured step runs the empty segments the eager step leaves out. Tiny widths
on the CPU, ``bart.large``'s on CUDA in bf16. Operators: top-level ATen operators outside the
graphs (after two warm-up steps), and those of them that are not views. On the CPU the graphs are
a stand-in that runs each pass eager in a region the count leaves out (``graph_standin.py``): the
counts and the errors mean something there, the times do not.

    python -m benchmarks.captured_segments --device cpu
"""

import argparse
from typing import Dict

import torch

from benchmarks.common import (BART_LARGE, CPU_TINY, Backward, ModelSize, add_device_args, best_seconds, build_model,
                               cuda_peaks, describe_device, device_defaults, dtype_name, free_memory, markdown_table,
                               random_tokens, start)
from benchmarks.compiled_training import STANDIN_NOTE, outside_compiled
from benchmarks.graph_standin import capture_options
from pagesum_plugin.architectures import LOSS_CHUNK_TOKENS
from pagesum_plugin.criterions.paged_cross_entropy import PagedLabelSmoothedCrossEntropy
from pagesum_plugin.systems.awesome.captured_segments import CapturedSegments


def segment_batch(dictionary, batch: int, segments: int, segment_len: int, tgt_len: int, generator, device) -> Dict:
    """A batch as the segmented dataset collates it: (batch, segments, len) sources, targets and
    summary inputs, the second half of the documents one segment short."""
    pad = dictionary.pad()
    src = random_tokens(dictionary, (batch, segments, segment_len), generator)
    target = random_tokens(dictionary, (batch, segments, tgt_len), generator)
    src[batch // 2:, -1], target[batch // 2:, -1] = pad, pad
    prev = torch.roll(target, 1, dims=2).masked_fill(target.eq(pad), pad)  # </s> <s> summary, per segment
    return {"id": torch.arange(batch), "nsentences": batch, "ntokens": int(target.ne(pad).sum()),
            "net_input": {"src_tokens": src.to(device)}, "segment_target": target.to(device),
            "segment_prev_output_tokens": prev.to(device),
            "target": target.flatten(1).to(device)}  # the whole summary's place: validation reads it, training does not


def measure(args, layers: int, segments: int, device, dtype) -> Dict[str, object]:
    base = BART_LARGE if device.type == "cuda" else CPU_TINY
    size = ModelSize(base.embed_dim, base.ffn_dim, layers, base.heads, base.vocab_words)
    torch.manual_seed(args.seed)
    task, model = build_model("awesome_bart_large", size, "--memory", args.memory, "--memory-slots",
                              str(args.memory_slots), "--max-source-positions", str(args.segment_len), dropout=0.0,
                              task="segmented_summarization")
    model.to(device=device, dtype=dtype).train()
    criterion = PagedLabelSmoothedCrossEntropy(task, sentence_avg=False, label_smoothing=0.1,
                                               loss_chunk_tokens=LOSS_CHUNK_TOKENS)
    sample = segment_batch(task.dictionary, args.batch, segments, args.segment_len, args.tgt_len,
                           torch.Generator().manual_seed(args.seed), device)
    captured = CapturedSegments(criterion, eager=task.train_segments, **capture_options(device))

    def gradients():
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    def eager_step():
        model.zero_grad(set_to_none=True)
        return task.train_segments(sample, model, criterion, Backward, False)[0]

    def captured_step():
        model.zero_grad(set_to_none=True)
        return captured.train_step(model, sample, Backward)[0]

    def peak_reserved(step):
        """The allocator's peak over one step, in GB: a captured step's graphs' memory pool included."""
        free_memory(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        step()
        peaks = cuda_peaks(device)
        return None if peaks is None else peaks.reserved / 1e9

    results = {}
    for name, step in (("eager", eager_step), ("captured", captured_step)):
        step(), step()  # warm-up; the captured step's first captures its passes
        loss = step()
        results[name] = (float(loss), gradients(), *outside_compiled(step), best_seconds(step, device, args.repeats),
                         peak_reserved(step))
    (eager_loss, eager_grads, eager_ops, eager_kernels, eager_s, eager_gb) = results["eager"]
    (loss, grads, ops, kernels, seconds, gb) = results["captured"]
    scale = max(float(g.abs().max()) for g in eager_grads.values())
    return {"layers": layers, "segments": segments, "eager ops": eager_ops, "eager kernels": eager_kernels,
            "captured ops": ops, "captured kernels": kernels, "graphs": len(captured.shapes),
            "loss error": abs(loss - eager_loss) / abs(eager_loss),
            "grad error": max(float((grads[name] - g).abs().max()) for name, g in eager_grads.items()) / scale,
            "eager s": eager_s, "captured s": seconds, "eager GB": eager_gb, "captured GB": gb}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 6, 12], help="encoder = decoder layers")
    parser.add_argument("--segments", type=int, nargs="+", default=[2, 4, 8], help="segments of a document")
    parser.add_argument("--batch", type=int, default=2, help="documents (half of them one segment short)")
    parser.add_argument("--segment-len", type=int, help="tokens per segment (default: 32 on the CPU, 1024 on CUDA)")
    parser.add_argument("--tgt-len", type=int, help="summary tokens per segment (default: 8 on the CPU, 128 on CUDA)")
    parser.add_argument("--memory", choices=("attentive", "compressive"), default="attentive",
                        help="AWESOME's memory (compressive: r = 5, in the first 3 layers)")
    parser.add_argument("--memory-slots", type=int, help="slots per memory layer (default: 8 on the CPU, 1024 on CUDA)")
    parser.add_argument("--repeats", type=int, default=3)
    return device_defaults(parser.parse_args(argv), segment_len=(1024, 32), tgt_len=(128, 8), memory_slots=(1024, 8))


def main(argv=None):
    args = parse_args(argv)
    device, dtype = start(args)
    captured = "" if device.type == "cuda" else STANDIN_NOTE
    where = "last" if args.memory == "attentive" else "first"
    print(f"Machine: {describe_device(device)}. AWESOME in {dtype_name(dtype)}: its {args.memory} memory in the "
          f"{where} 3 layers of each stack (every layer of fewer), {args.memory_slots} slots; {args.batch} documents, "
          f"half of them one segment short; segments of {args.segment_len} tokens, {args.tgt_len}-token summaries. A "
          f"training step: every segment's forward pass, the recipes' loss ({LOSS_CHUNK_TOKENS} summary tokens at "
          f"a time) and backward, the memory carried. Captured: each segment's pass replayed from CUDA graphs "
          f"(--capture-training){captured}. Operators: top-level ATen operators outside the graphs; errors "
          f"relative (the gradients' to the largest); times: best of {args.repeats}; peak reserved: the allocator's "
          f"over one step, the captured graphs' memory pool included (CUDA only).\n")
    rows = []
    for layers in args.layers:
        for segments in args.segments:
            m = measure(args, layers, segments, device, dtype)
            rows.append([layers, segments, m["eager ops"], m["captured ops"],
                         f"{m['eager ops'] / m['captured ops']:.1f}x",
                         f"{m['eager kernels']} / {m['captured kernels']}", m["graphs"], f"{m['loss error']:.1e}",
                         f"{m['grad error']:.1e}", f"{m['eager s']:.4f}", f"{m['captured s']:.4f}",
                         gigabytes(m["eager GB"]), gigabytes(m["captured GB"])])
    print(markdown_table(["layers", "segments", "eager: operators / step", "captured: operators outside the graphs",
                          "fewer", "views aside: eager / captured", "passes captured", "loss error",
                          "gradient error", "eager step s", "captured step s", "eager peak reserved GB",
                          "captured peak reserved GB"], rows))


def gigabytes(value) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
