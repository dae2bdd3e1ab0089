"""``pagesum-plan``: what fits a GPU's memory, for every system, before training anything.

    pagesum-plan --budget 24GB --arch pagesum_bart_large --summary-tokens 1024
    pagesum-plan --budget 80GB --arch pagesum_bart_large --pages 20

For each system at the architecture's size (PageSum, full-attention BART, HEPOS, HED, AWESOME)
and each batch size, the longest input whose predicted training-step peak
(``model.predict``) is within the budget, and the cheapest settings that fit it: bf16
rather than fp32, no activation checkpointing rather than checkpointing (which recomputes every
layer in backward), ``adamw_torch`` rather than Adafactor (``adafactor_batched``, which changes the
optimisation), and
fairseq's 16-bit wrapper with fp32 master weights rather than its memory-efficient one
(``--memory-efficient-bf16``). Under the memory-efficient wrapper ``adamw_torch`` keeps the fp32
master weights itself and no fp32 gradients (the same updates, 4 bytes a weight fewer), and
Adafactor keeps no fp32 copy at all (updates rounded to bf16).
Inputs are whole pages of ``--page-tokens`` (PageSum's pages, HED's documents, AWESOME's
segments) or, for a flat input (BART, HEPOS), multiples of 1,024 tokens.

The budget is the card's memory, as ``nvidia-smi`` shows it: the CUDA context and library
workspaces (``--cuda-context``, 0.8 GB as measured on an H100) come off it before tensors.
Leave room for the allocator's fragmentation too (about 1 to 2 GB on a 24 GB card). With
``--pages N``, the table answers for an input of N pages (of ``--page-tokens``; N x
``--page-tokens`` tokens for a flat input) instead: the cheapest settings it fits with, or
what it would need.
"""

import argparse
import itertools
import re
import sys
from dataclasses import replace
from typing import Callable, List, Optional, Tuple

from ..architectures import SYSTEMS, architecture
from ..corpus.options import MAX_SUMMARY_TOKENS, ViewConfig
from .model import GB, KERNELS, Step, predict

PROG = "pagesum-plan"
UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
         "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}
FLAT_UNIT = 1024  # a flat input grows by this many tokens
# (dtype, checkpointing, optimizer, fp32 master weights), cheapest to run first
ADAFACTOR = "adafactor_batched"  # fairseq's Adafactor update, batched by shape (optim/adafactor_batched.py)
OPTIMIZER_SETTINGS = (("adamw_torch", True), ("adamw_torch", False), (ADAFACTOR, True), (ADAFACTOR, False))
SETTINGS = sorted(((dtype, checkpointing, optimizer, masters)
                   for dtype, checkpointing, (optimizer, masters) in itertools.product(
                       ("bf16", "fp32"), (False, True), OPTIMIZER_SETTINGS)
                   if masters or dtype != "fp32"),
                  key=lambda s: (s[1], s[2] == ADAFACTOR, not s[3], s[0] == "fp32"))


CUDA_CONTEXT = "0.8GB"  # the CUDA context and library workspaces beside torch's allocator (an H100: 12.4 - 11.6 GB)


def parse_bytes(text: str) -> float:
    """``24GB``, ``24 GiB``, ``24000MB``, ``512B``: an amount with its unit (a bare number is
    refused: 24 would be 24 bytes)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    if match and not match.group(2):
        raise argparse.ArgumentTypeError(f"{text!r} has no unit: write {text.strip()}GB (or GiB, MB, ...)")
    if not match or match.group(2).upper() not in UNITS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an amount such as 24GB, 24GiB or 24000MB")
    return float(match.group(1)) * UNITS[match.group(2).upper()]


def largest(fits: Callable[[int], bool], cap: int) -> int:
    """The largest n in 1..cap with ``fits(n)`` (0 if none), for ``fits`` true on a prefix."""
    if not fits(1):
        return 0
    low, high = 1, cap + 1
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def step_for(system: str, base: Step, units: int, page_tokens: int) -> Step:
    """``base`` reading ``units`` pages (or, for a flat input, ``units`` x 1,024 tokens)."""
    if SYSTEMS[system].flat:
        return replace(base, system=system, pages=1, page_tokens=units * FLAT_UNIT)
    return replace(base, system=system, pages=units, page_tokens=page_tokens)


def best_fit(system: str, base: Step, budget: float, page_tokens: int, cap: int) -> Tuple[int, Optional[Step]]:
    """(units, the cheapest settings' step) for the longest input within ``budget``."""
    def fits_with(settings) -> Callable[[int], bool]:
        dtype, checkpointing, optimizer, masters = settings
        configured = replace(base, dtype=dtype, checkpointing=checkpointing, optimizer=optimizer,
                             master_weights=masters)
        return lambda units: predict(step_for(system, configured, units, page_tokens)).peak <= budget

    most = max(largest(fits_with(settings), cap) for settings in SETTINGS)
    if most == 0:
        return 0, None
    for dtype, checkpointing, optimizer, masters in SETTINGS:  # the cheapest that fits the longest input
        configured = replace(base, dtype=dtype, checkpointing=checkpointing, optimizer=optimizer,
                             master_weights=masters)
        chosen = step_for(system, configured, most, page_tokens)
        if predict(chosen).peak <= budget:
            return most, chosen
    raise AssertionError("the longest input fits some setting")


def cheapest(system: str, base: Step, budget: float, page_tokens: int, units: int) -> Optional[Step]:
    """The cheapest settings' step reading ``units`` pages within ``budget``, or None."""
    for dtype, checkpointing, optimizer, masters in SETTINGS:
        configured = replace(base, dtype=dtype, checkpointing=checkpointing, optimizer=optimizer,
                             master_weights=masters)
        step = step_for(system, configured, units, page_tokens)
        if predict(step).peak <= budget:
            return step
    return None


def describe_settings(step: Step) -> str:
    settings = f"{step.dtype}, {'checkpointing' if step.checkpointing else 'no checkpointing'}, {step.optimizer}"
    if step.master_weights or step.dtype == "fp32":
        return settings
    if step.optimizer == "adamw_torch":
        return settings + ", fp32 masters in the optimizer, no fp32 gradients (--memory-efficient-bf16)"
    return settings + ", no fp32 copy (--memory-efficient-bf16)"


def describe_input(step: Step, units: int, cap: int) -> str:
    shape = f"{step.page_tokens}" if SYSTEMS[step.system].flat else f"{step.pages} x {step.page_tokens}"
    return shape + (" (the cap)" if units == cap else "")


def table(args, arch_name: str) -> List[List[str]]:
    _, arch = architecture(arch_name)
    tensors = args.budget - args.cuda_context
    rows = []
    for system in args.systems:
        for batch in args.batches:
            base = Step(system, arch, 1, args.page_tokens, args.summary_tokens, batch=batch,
                        decoder_kernel=args.decoder_attention)
            if args.pages:  # the user's input: does it fit, and how cheaply
                step = cheapest(system, base, tensors, args.page_tokens, args.pages)
                if step is None:
                    needs = predict(step_for(system, replace(base, dtype="bf16", checkpointing=True,
                                                             optimizer=ADAFACTOR, master_weights=False),
                                             args.pages, args.page_tokens)).peak + args.cuda_context
                    wanted = step_for(system, base, args.pages, args.page_tokens)
                    rows.append([system, str(batch), describe_input(wanted, 0, -1), f"{wanted.input_tokens:,}",
                                 f"does not fit: needs {needs / GB:.1f} GB at the least", "-"])
                    continue
                rows.append([system, str(batch), describe_input(step, 0, -1), f"{step.input_tokens:,}",
                             describe_settings(step), f"{(predict(step).peak + args.cuda_context) / GB:.1f}"])
                continue
            cap = args.max_tokens // (FLAT_UNIT if SYSTEMS[system].flat else args.page_tokens)
            units, step = best_fit(system, base, tensors, args.page_tokens, cap)
            if step is None:
                rows.append([system, str(batch), "nothing fits", "", "", ""])
                continue
            rows.append([system, str(batch), describe_input(step, units, cap), f"{step.input_tokens:,}",
                         describe_settings(step), f"{(predict(step).peak + args.cuda_context) / GB:.1f}"])
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               f"  {PROG} --budget 24GB --arch pagesum_bart_large --summary-tokens 1024\n"
               "      the longest input of every system that trains on a 24 GB card\n"
               f"  {PROG} --budget 80GB --arch pagesum_bart_large --pages 20 --systems pagesum\n"
               "      whether 20 pages of 1,024 tokens train on an 80 GB card, and how cheaply")
    parser.add_argument("--budget", type=parse_bytes, required=True,
                        help="the card's memory, as nvidia-smi shows it, with its unit: e.g. 24GB or 24GiB")
    parser.add_argument("--cuda-context", type=parse_bytes, default=parse_bytes(CUDA_CONTEXT),
                        help=f"what the CUDA context and libraries hold beside the tensors (default {CUDA_CONTEXT})")
    parser.add_argument("--pages", type=int, help="answer for this many pages (of --page-tokens) instead of finding "
                                                  "the longest input")
    parser.add_argument("--arch", required=True, help="its size sets every system's: e.g. pagesum_bart_large")
    parser.add_argument("--summary-tokens", type=int, default=MAX_SUMMARY_TOKENS)
    parser.add_argument("--page-tokens", type=int, default=ViewConfig.max_page_tokens,
                        help="tokens per page, document or segment")
    parser.add_argument("--max-tokens", type=int, default=65536, help="the longest input tried")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument("--decoder-attention", choices=KERNELS, default="fused",
                        help="the decoder's attention kernel: bmm (scores kept) or fused (SDPA)")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        architecture(args.arch)
    except ValueError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    if min(args.summary_tokens, args.page_tokens, args.max_tokens, *args.batches, args.pages or 1) < 1:
        print(f"{PROG}: error: token counts, pages and batch sizes must be at least 1", file=sys.stderr)
        return 2
    if args.cuda_context >= args.budget:
        print(f"{PROG}: error: --budget {args.budget / GB:.1f} GB leaves nothing beside the CUDA context "
              f"({args.cuda_context / GB:.1f} GB)", file=sys.stderr)
        return 2
    header = ["system", "batch", "input (pages x tokens)" if args.pages else "largest input (pages x tokens)",
              "tokens", "settings", "predicted peak on the GPU GB"]
    rows = table(args, args.arch)
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    _, arch = architecture(args.arch)
    print(f"Budget {args.budget / GB:.1f} GB on the GPU, {(args.budget - args.cuda_context) / GB:.1f} GB for tensors "
          f"beside the CUDA context, {args.arch} dimensions ({arch.layers} + {arch.layers} layers, "
          f"d={arch.embed_dim}), {args.summary_tokens}-token summaries, decoder attention {args.decoder_attention}:")
    for row in [header] + rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
