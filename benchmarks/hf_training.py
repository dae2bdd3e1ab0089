"""A training step of ``pagesum_plugin.hf``'s PageSum, its loss taken on the whole logits against a chunk of
summary tokens at a time (``PageSumConfig.loss_chunk_tokens``, the plugin's ``chunked_loss.py``).

One model, random weights, BART's vocabulary of 50,265 words, which is what makes a summary's logits large:
``bart.large`` dimensions in bf16 on CUDA; on the CPU, in fp32, a narrower BART by default (d=256, 2+2 layers) or
``bart.base``'s with ``--size base``. A step is forward with labels and backward, in training mode, dropout as
configured. The two settings take turns on the same batch for ``--repeats`` rounds after a warm-up; then the peak
memory one step adds (``pagesum_recipes.profiling.peak_memory``: the CUDA allocator, or torch's MemTracker on the
CPU), and the loss of each, which must agree.

    python -m benchmarks.hf_training --device cpu --threads 2
"""

import argparse
import sys

import torch

from benchmarks.common import add_device_args, best_seconds, describe_device, dtype_name, markdown_table, start
from pagesum_plugin.architectures import ARCHITECTURES, BENCHMARK_SIZES, LOSS_CHUNK_TOKENS
from pagesum_plugin.hf import PageSumConfig, PageSumForConditionalGeneration
from pagesum_recipes.profiling import peak_memory

BART_VOCAB = ARCHITECTURES["bart_large"].vocab  # what makes a summary's logits large
# the dimensions (the vocabulary is BART's in every size): on CUDA bart_large's, on the CPU --size
CPU_SIZES = {"small": BENCHMARK_SIZES["cpu_small"], "base": ARCHITECTURES["bart_base"]}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--pages", type=int, default=4, help="pages per example (default: 4)")
    parser.add_argument("--page-len", type=int, default=256, help="tokens per page (default: 256)")
    parser.add_argument("--out-len", type=int, default=512, help="summary tokens (default: 512)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", choices=tuple(CPU_SIZES), default="small", help="CPU dimensions (default: small)")
    args = parser.parse_args(argv)
    if args.quick:  # the smoke test's
        args.pages, args.page_len, args.out_len, args.batch, args.repeats = 2, 16, 128, 1, 1
    return args


def config_for(args) -> PageSumConfig:
    """The model's dimensions: ``bart_large`` on CUDA, else ``--size``'s; BART's vocabulary."""
    arch = ARCHITECTURES["bart_large"] if args.device == "cuda" else CPU_SIZES[args.size]
    return PageSumConfig(vocab_size=BART_VOCAB, d_model=arch.embed_dim, encoder_layers=arch.layers,
                         decoder_layers=arch.layers, encoder_attention_heads=arch.heads,
                         decoder_attention_heads=arch.heads, encoder_ffn_dim=arch.ffn_dim, decoder_ffn_dim=arch.ffn_dim,
                         max_position_embeddings=max(args.page_len, args.out_len) + 2)


def main(argv=None):
    args = parse_args(argv)
    device, dtype = start(args)
    torch.manual_seed(args.seed)
    config = config_for(args)
    model = PageSumForConditionalGeneration(config).to(device=device, dtype=dtype).train()
    generator = torch.Generator().manual_seed(args.seed)
    words = (4, config.vocab_size)  # no special token inside a page or a summary
    input_ids = torch.randint(*words, (args.batch, args.pages, args.page_len), generator=generator)
    input_ids[:, :, 0], input_ids[:, :, -1] = config.bos_token_id, config.eos_token_id
    labels = torch.randint(*words, (args.batch, args.out_len), generator=generator)
    labels[:, 0], labels[:, -1] = config.bos_token_id, config.eos_token_id
    input_ids, labels = input_ids.to(device), labels.to(device)
    losses = {}

    def step(chunk: int):
        def run():
            torch.manual_seed(args.seed)  # the same dropout masks for both
            model.config.loss_chunk_tokens = chunk
            model.zero_grad(set_to_none=True)
            out = model(input_ids=input_ids, labels=labels)
            out.loss.backward()
            losses[chunk] = out.loss.item()
        return run

    settings = {0: "whole logits", LOSS_CHUNK_TOKENS: f"{LOSS_CHUNK_TOKENS} summary tokens at a time"}
    seconds = {chunk: float("inf") for chunk in settings}
    for chunk in settings:
        step(chunk)()  # warm-up
    for _ in range(args.repeats):  # taking turns on the same batch
        for chunk in settings:
            seconds[chunk] = min(seconds[chunk], best_seconds(step(chunk), device, 1, warmup=0))
    peaks = {}
    for chunk in settings:
        model.zero_grad(set_to_none=True)
        peaks[chunk] = peak_memory(step(chunk), device, [model]).added
    whole = peaks[0]
    rows = [[name, f"{peaks[chunk] / 1e6:.0f}", f"{peaks[chunk] / whole:.2f}x", f"{seconds[chunk]:.3f}",
             f"{losses[chunk]:.6f}"] for chunk, name in settings.items()]
    print(f"{describe_device(device)}, {dtype_name(dtype)}; PageSum d={config.d_model}, "
          f"{config.encoder_layers}+{config.decoder_layers} layers, vocabulary {config.vocab_size:,}; batch "
          f"{args.batch} x {args.pages} pages x {args.page_len} tokens, {args.out_len}-token summaries; a training "
          f"step (forward with labels, backward); step s: the best of {args.repeats} rounds, taking turns\n")
    print(markdown_table(["loss", "peak MB the step adds", "vs whole logits", "step s", "loss"], rows))
    agree = abs(losses[0] - losses[LOSS_CHUNK_TOKENS]) <= 1e-4 * max(1.0, abs(losses[0]))
    print(f"\nThe losses agree: {'yes' if agree else 'NO'}.")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
