"""Training memory and step time of HEPOS models as the input grows, against PageSum and full attention.

For every input length n (1K to 16K tokens by default) the script runs one training step
(forward, label-smoothed cross entropy, backward) of

* **HEPOS** with each encoder self-attention (``full``, ``window``, ``lsh``, ``sinkhorn``,
  at the paper's settings: w = 256, 4 rounds of 64-token buckets, 128-token blocks) and
  HEPOS encoder-decoder attention (stride 4), on one flat sequence of n tokens;
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

import pagesum_plugin  # noqa: F401  (registers the task and the models)
from benchmarks.common import best_seconds, describe_machine, markdown_table, peak_step_bytes
from pagesum_plugin.corpus.format import CorpusMeta

ENCODERS = ("full", "window", "lsh", "sinkhorn")
MODELS = tuple(f"HEPOS+{e}" for e in ENCODERS) + ("Sinkhorn, full cross", "PageSum", "Full attn")
FULL_ENCODERS = ("HEPOS+full", "Full attn")  # quadratic in the input length
ATTENTION_KERNELS = {
    "math": [SDPBackend.MATH],
    "fused": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH],
}
# (embed dim, ffn dim, layers, heads, vocabulary words)
SIZES = {"cpu": (128, 512, 2, 4, 2000), "cuda": (1024, 4096, 12, 16, 50260)}


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
    args = parser.parse_args(argv)
    on_cuda = args.device == "cuda"
    args.page_len = args.page_len or (1024 if on_cuda else 512)
    args.tgt_len = args.tgt_len or (512 if on_cuda else 128)
    args.max_full_tokens = args.max_full_tokens or (16384 if on_cuda else 4096)
    args.repeats = args.repeats or (3 if on_cuda else 1)
    return args


def build(arch: str, device: str, dtype, *extra: str):
    """(dictionary, model) for ``arch`` at the device's size, in training mode."""
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
        CorpusMeta(tokenizer="none", dataset="synthetic", view="flat", dictionary_size=len(dictionary)).save(data_dir)
        argv = [data_dir, "--task", "paged_summarization", "--arch", arch, "--dropout", "0.1",
                *map(str, dims), *extra]
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        task = tasks.setup_task(args)
        model = task.build_model(args)
    return task.dictionary, model.to(device=device, dtype=dtype).train()


def model_settings(name: str, tokens: int, page_len: int):
    """(arch, extra flags, input layout) of a benchmarked model for an input of ``tokens``."""
    positions = ["--max-source-positions", str(tokens)]
    if name == "PageSum":
        return "pagesum_bart_large", ["--max-source-positions", str(page_len)], "pages"
    if name == "Full attn":
        return "bart_large", positions, "flat2d"
    if name == "Sinkhorn, full cross":
        return "hepos_bart_large", positions + ["--encoder-attention", "sinkhorn", "--cross-attention", "full"], "flat"
    encoder = name.split("+")[1]
    return "hepos_bart_large", positions + ["--encoder-attention", encoder, "--cross-attention", "hepos"], "flat"


def source(dictionary, tokens: int, page_len: int, layout: str, generator) -> torch.Tensor:
    """Random words as the task lays them out: (1, 1, n) flat, (1, n / page_len, page_len) pages."""
    if layout == "pages":
        shape = (1, tokens // page_len, page_len)
    else:
        shape = (1, 1, tokens)
    src = torch.randint(dictionary.nspecial, len(dictionary), shape, generator=generator)
    src[:, :, 0], src[:, :, -1] = dictionary.bos(), dictionary.eos()
    return src[:, 0] if layout == "flat2d" else src


def make_step(model, src_tokens, target, prev_output_tokens, pad: int):
    def step():
        model.zero_grad(set_to_none=True)
        logits, _ = model(src_tokens, None, prev_output_tokens)  # (batch, tgt_len, vocab)
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), target.view(-1), ignore_index=pad,
                               label_smoothing=0.1)
        loss.backward()

    return step


def measure_one(name: str, tokens: int, args, device, dtype) -> Optional[Dict[str, float]]:
    arch, extra, layout = model_settings(name, tokens, args.page_len)
    torch.manual_seed(args.seed)
    dictionary, model = build(arch, device.type, dtype, *extra)
    generator = torch.Generator().manual_seed(args.seed)
    src = source(dictionary, tokens, args.page_len, layout, generator).to(device)
    target = torch.randint(dictionary.nspecial, len(dictionary), (1, args.tgt_len), generator=generator)
    target[:, 0], target[:, -1] = dictionary.bos(), dictionary.eos()
    prev = torch.roll(target, 1, dims=1)
    step = make_step(model, src, target.to(device), prev.to(device), dictionary.pad())
    try:
        seconds = best_seconds(step, device, args.repeats)
        model.zero_grad(set_to_none=True)
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
        if value is None:
            return "OOM"
        if value == "skipped":
            return "—"
        return f"{value[key]:.0f}" if key == "mb" else f"{value[key]:.2f}"

    header = ["input tokens"] + list(MODELS)
    memory = [[f"{r['tokens']:,}"] + [cell(r[m], "mb") for m in MODELS] for r in rows]
    time = [[f"{r['tokens']:,}"] + [cell(r[m], "s") for m in MODELS] for r in rows]
    dim, ffn, layers, heads, words = SIZES[device.type]
    setup = (
        f"Machine: {describe_machine(device)}. Model: {layers}+{layers} layers, d={dim}, ffn={ffn}, {heads} heads, "
        f"vocab {words + 4}, {str(dtype).replace('torch.', '')}, attention kernel: {args.attention}. "
        f"Summary {args.tgt_len} tokens, batch 1; PageSum pages of {args.page_len} tokens; HEPOS stride 4, "
        f"window 256, LSH 4 x 64, Sinkhorn blocks of 128; full encoder attention up to {args.max_full_tokens:,} "
        f"tokens (— past it). Step time: best of {args.repeats} after a warm-up step."
    )
    return "\n\n".join([setup, "Peak training-step memory above the weights (MB):", markdown_table(header, memory),
                        "Training step time (s):", markdown_table(header, time)])


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
    with sdpa_kernel(ATTENTION_KERNELS[args.attention]):
        rows = measure(args, device, dtype)
    print(render(rows, args, device, dtype))


if __name__ == "__main__":
    main()
