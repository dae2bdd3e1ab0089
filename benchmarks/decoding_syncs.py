"""Where a decoding step still waits for the device: every host sync of a beam search, by
operator and by the line that calls it, per step.

A search of ``--steps`` tokens (forced lengths) over a batch whose examples have different
page counts runs inside ``pagesum_recipes.profiling.HostSyncs``, which records each operator
that makes the host wait (a value read back, a data-dependent shape, a boolean-mask index)
with its caller. The table gives each call site's count divided by the number of steps, for the
generator's own search loop and, for comparison, fairseq's loop run by the same generator
(``benchmarks/reference/search.py``). Weights are random; the syncs do not depend on them.

    python -m benchmarks.decoding_syncs --device cpu
"""

import argparse
import collections
import contextlib

import torch

from benchmarks.common import CPU_SMALL, add_device_args, build_model, describe_device, markdown_table, paged_source, start
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from benchmarks.reference.search import fairseq_loop
from pagesum_recipes.profiling import HostSyncs


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--no-repeat-ngram-size", type=int, default=3)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    device, _ = start(args)
    torch.manual_seed(args.seed)
    task, model = build_model("pagesum_bart_large", CPU_SMALL, dropout=0.0)
    model.to(device).eval()
    dictionary = task.dictionary
    src = paged_source(dictionary, 3, 3, 32, torch.Generator().manual_seed(args.seed)).to(device)
    src[1, 2:] = dictionary.pad()  # examples of 3, 2 and 3 pages
    generator = PageSumSequenceGenerator([model], dictionary, beam_size=args.beam, max_len_a=0,
                                         max_len_b=args.steps, min_len=args.steps, decoding="eager",
                                         no_repeat_ngram_size=args.no_repeat_ngram_size)
    sample = {"net_input": {"src_tokens": src}}
    print(f"Machine: {describe_device(device)}.")
    loops = {"the generator's own loop": contextlib.nullcontext(), "fairseq's loop": fairseq_loop(generator)}
    for name, loop in loops.items():
        with torch.no_grad(), loop, HostSyncs() as syncs:
            generator.generate([model], sample)
        counts = collections.Counter(syncs.seen)
        rows = [[place, operator, f"{count / args.steps:.2f}"] for (operator, place), count in
                sorted(counts.items(), key=lambda item: item[0][1])]
        print(f"\n{name}: beam {args.beam}, {args.steps} steps, --no-repeat-ngram-size "
              f"{args.no_repeat_ngram_size}, 3 examples: host syncs per step by call site (the encoder pass and "
              f"the search's set-up included):")
        print(markdown_table(["call site", "operator", "per step"], rows))


if __name__ == "__main__":
    main()
