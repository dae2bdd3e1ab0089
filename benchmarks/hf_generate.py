"""transformers' ``generate()`` with ``pagesum_plugin.hf`` against the plugin's page generator.

The same weights (``pagesum-convert to-hf``'s conversion), random, ``bart.large`` dimensions on CUDA, on the CPU
``bart.base``'s with ``--size base`` and by default a narrower BART (d=256, 2+2 layers, a 2,000-word vocabulary)
that runs both sizes of input in minutes on 2 shared cores, beam ``--beam``, batch 1, a summary of ``--out-len`` tokens (lengths forced: min = max,
so both search the same number of steps), at one page and at ``--pages`` x ``--page-len``. The decoders take turns
for ``--repeats`` rounds after one warm-up each: the best round of each, and the median over rounds of each
round's ratio to the plugin's generator. Every decoder's summary is asserted to be the plugin's.

``generate()`` also runs with transformers' static cache (``cache_implementation="static"``: the self-attention
cache preallocated to the summary's length, the cross-attention cache to a page's). On CUDA the plugin decodes with
its steps captured as CUDA graphs (its default there) and also step by step, and transformers' ``generate()`` also
runs with the model's forward compiled by ``torch.compile``. (transformers compiles the forward by itself, with CUDA
graphs, only for greedy search and sampling with a static cache, not for beam search.)

    python -m benchmarks.hf_generate --device cpu --threads 2
"""

import argparse
import statistics
import sys
from typing import List

import torch
import transformers

from benchmarks.beam_cache import BART_BASE
from benchmarks.common import BART_LARGE, CPU_SMALL, CPU_TINY, add_device_args, build_model, describe_device, dtype_name, \
    markdown_table, paged_source, start
from benchmarks.fused_decoding import alternating_rounds
from pagesum_plugin.checkpoints.convert import pagesum_hf_model
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.hf import summary_lengths

PLUGIN = "plugin's generator, step loop"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--pages", type=int, default=7, help="pages of the long input (default: 7)")
    parser.add_argument("--page-len", type=int, default=512, help="tokens per page (default: 512)")
    parser.add_argument("--out-len", type=int, default=32, help="summary tokens (default: 32)")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size", choices=("small", "base"), default="small", help="CPU dimensions (default: small)")
    args = parser.parse_args(argv)
    if args.quick:  # the tiny model and input of the smoke test
        args.pages, args.page_len, args.out_len, args.repeats = 2, 16, 4, 1
    return args


def rows_for(args, size, pages: int, device, dtype) -> List[List[object]]:
    torch.manual_seed(args.seed)
    task, model = build_model("pagesum_bart_base", size, dropout=0.0)
    with torch.no_grad():  # confidences that tell the pages apart
        model.decoder.page_confidence.weight.normal_(0, 1.0)
    hf = pagesum_hf_model(model.args, model.state_dict(), {"label_smoothing": 0.1})
    for each in (model, hf):
        each.to(device=device, dtype=dtype).eval()
    dictionary = task.dictionary
    src = paged_source(dictionary, 1, pages, args.page_len, torch.Generator().manual_seed(args.seed)).to(device)
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(dictionary.pad()).sum((1, 2))}}
    length, beam = args.out_len, args.beam
    settings = dict(beam_size=beam, max_len_a=0, max_len_b=length, min_len=length)
    step_loop = PageSumSequenceGenerator([model], dictionary, decoding="eager", **settings)
    search = dict(num_beams=beam, do_sample=False, early_stopping=True, no_repeat_ngram_size=0,
                  **summary_lengths(length, length))
    runs = {PLUGIN: lambda: step_loop.generate([model], sample)[0][0]["tokens"],
            "transformers generate": lambda: hf.generate(input_ids=src, **search)[0, 1:],
            "transformers generate, static cache":
                lambda: hf.generate(input_ids=src, cache_implementation="static", **search)[0, 1:]}
    if device.type == "cuda":
        captured = PageSumSequenceGenerator([model], dictionary, decoding="graph", **settings)
        compiled = pagesum_hf_model(model.args, model.state_dict(), {"label_smoothing": 0.1}).to(device, dtype).eval()
        compiled.forward = torch.compile(compiled.forward, dynamic=True)
        runs["plugin's generator, captured steps"] = lambda: captured.generate([model], sample)[0][0]["tokens"]
        runs["transformers generate, compiled forward"] = lambda: compiled.generate(input_ids=src, **search)[0, 1:]

    with torch.no_grad():
        expected = runs[PLUGIN]()
        for name, run in runs.items():
            assert torch.equal(run().cpu(), expected.cpu()), f"{name}: not the plugin's summary"
    rounds = alternating_rounds(runs, args.repeats, device)
    print(f"{pages} page(s) done", file=sys.stderr, flush=True)
    rows = []
    for name, times in rounds.items():
        paired = statistics.median(t / b for t, b in zip(times, rounds[PLUGIN]))
        rows.append([f"{pages} x {args.page_len}", name, f"{min(times):.2f}", f"{min(times) / min(rounds[PLUGIN]):.2f}x",
                     f"{paired:.2f}x"])
    return rows


def main(argv=None):
    args = parse_args(argv)
    device, dtype = start(args)
    size = (CPU_TINY if args.quick else BART_LARGE if device.type == "cuda"
            else {"small": CPU_SMALL, "base": BART_BASE}[args.size])
    name = {CPU_TINY: "tiny", BART_LARGE: "bart.large", BART_BASE: "bart.base", CPU_SMALL: "small BART"}[size]
    print(f"Machine: {describe_device(device)}. Dimensions: {name} (d={size.embed_dim}, {size.layers}+{size.layers} "
          f"layers, vocab {size.vocab_words + 4}) in {dtype_name(dtype)}, random weights, beam {args.beam}, batch 1, "
          f"{args.out_len}-token summaries; transformers {transformers.__version__}.",
          flush=True)
    print(f"\n{args.repeats} rounds, taking turns; best round, and the median over rounds of each round's ratio to "
          "the plugin's generator; every summary asserted equal to the plugin's:\n", flush=True)
    rows = [row for pages in sorted({1, args.pages}) for row in rows_for(args, size, pages, device, dtype)]
    print(markdown_table(["input", "decoder", "s / summary (best)", "vs plugin (best)", "vs plugin (median of rounds)"],
                         rows), flush=True)


if __name__ == "__main__":
    main()
