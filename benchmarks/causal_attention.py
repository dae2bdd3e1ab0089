"""The decoder's training self-attention: causal SDPA with no mask, against SDPA given fairseq's
mask (the causal float mask, with the summaries' padding filled in), the call it replaced.

A full pass of one ``DecoderSelfAttention`` (projections, attention, output projection),
forward and backward, over right-padded summaries of each ``--lengths`` tokens: ``--rows``
rows (a batch's pages, in PageSum), one of them a quarter shorter. Both calls give the same
outputs at every position a loss reads; the table says how far apart (fp32 on the CPU, bf16
on CUDA), and each one's best time, the two taking turns.

    python -m benchmarks.causal_attention --device cpu --threads 2
"""

import argparse
import math
import time
from typing import Dict

import torch
import torch.nn.functional as F

from benchmarks.common import BART_BASE, BART_LARGE, add_device_args, describe_device, markdown_table, start
from pagesum_plugin.modules.decoder_self_attention import DecoderSelfAttention
from pagesum_plugin.modules.fused_attention import attention_dropout


def masked_call(module: DecoderSelfAttention, query, key_padding_mask, attn_mask):
    """The full pass with fairseq's mask handed to SDPA: (1, 1, T, T) causal, padding keys -inf."""
    tgt_len, rows, embed_dim = query.shape
    q, k, v = module._project(query.contiguous())  # (rows, heads, tgt_len, head_dim) each
    padding = key_padding_mask.bool()[:, None, None, :]  # (rows, 1, 1, tgt_len)
    mask = attn_mask.to(q.dtype)[None, None].masked_fill(padding, -math.inf)  # (rows, 1, tgt_len, tgt_len)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=attention_dropout(module), scale=1.0)
    return module.out_proj(out.permute(2, 0, 1, 3).reshape(tgt_len, rows, embed_dim))


def measure(module: DecoderSelfAttention, length: int, rows: int, repeats: int, device, dtype) -> Dict[str, float]:
    x = torch.randn(length, rows, module.embed_dim, device=device, dtype=dtype, requires_grad=True)
    causal = torch.triu(torch.full((length, length), -math.inf, device=device, dtype=dtype), 1)
    padding = torch.zeros(rows, length, dtype=torch.bool, device=device)
    padding[1, length - length // 4:] = True  # one summary a quarter shorter, padded on the right
    real = ~padding.t()[:, :, None]  # (tgt_len, rows, 1): the positions a loss reads

    def causal_pass():
        return module(x, x, x, key_padding_mask=padding, attn_mask=causal, need_weights=False)[0]

    def masked_pass():
        return masked_call(module, x, padding, causal)

    error = ((causal_pass() - masked_pass()) * real).abs().max().item()
    times = {"masked": [], "causal": []}
    for _ in range(repeats + 1):  # the first round warms both up
        for name, run in (("masked", masked_pass), ("causal", causal_pass)):
            if device.type == "cuda":
                torch.cuda.synchronize()
            begin = time.perf_counter()
            run().float().sum().backward()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - begin)
    return {"error": error, **{name: min(seconds[1:]) for name, seconds in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_device_args(parser)
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024], help="summary tokens")
    parser.add_argument("--rows", type=int, default=8, help="summaries (a batch's pages)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device, dtype = start(args)
    if args.quick:
        args.lengths, args.repeats = [64], 1
    size = BART_LARGE if device.type == "cuda" else BART_BASE
    torch.manual_seed(args.seed)
    module = DecoderSelfAttention(size.embed_dim, size.heads, self_attention=True).to(device=device, dtype=dtype)
    rows = []
    for length in args.lengths:
        m = measure(module.train(), length, args.rows, args.repeats, device, dtype)
        rows.append([length, f"{m['masked'] * 1e3:.1f}", f"{m['causal'] * 1e3:.1f}", f"{m['masked'] / m['causal']:.2f}x",
                     f"{m['error']:.1e}"])
    print(f"{describe_device(device)}; one decoder self-attention, {size.embed_dim} wide, {size.heads} heads, "
          f"{args.rows} summaries (one a quarter shorter), {str(dtype).split('.')[-1]}; forward and backward, "
          f"best of {args.repeats}, taking turns.\n")
    print(markdown_table(["summary tokens", "masked ms", "causal ms", "speed-up", "max difference where a loss reads"],
                         rows))


if __name__ == "__main__":
    main()
