"""Where a PageSum training step's memory goes: with the attention of before, with fused
attention, with the feed-forward's activation recomputed in backward, with the chunked
output-layer loss, with the layer norms' outputs recomputed in backward, and with bool dropout
masks.

The step (forward, the plugin's label-smoothed cross entropy, backward) is measured with
torch's ``MemTracker`` on CPU (``pagesum_recipes.profiling``), ``bart.base``'s widths and vocabulary
(``pagesum_plugin.architectures``) and random weights, in two ways:

* **per layer**: the step's peak (on top of the weights) at 1 and at 2 encoder+decoder
  layers. Every layer adds the same activations, so the difference is one layer's cost and
  the 1-layer peak minus it is what does not depend on depth (embeddings, the output
  layer's logits and their gradient); ``bart.base``'s 6 layers are then
  ``fixed + 6 x per layer`` (``--check-layers 6`` measures that step too);
* **per module**: the activations each sub-module of the second of two decoder layers keeps for
  backward (what it added to the live tensors between its forward's start and end).

Six steps (``STEPS``), each adding one change to the one before: ``before`` runs every
layer of the plugin on its path from before (``reference_attention``: cross-attention as
fairseq's bmm + softmax, with its probabilities kept in fp32, and in bf16 a second copy in the
model's dtype; the feed-forward keeping its hidden layer before and after the activation; every
layer norm's output kept by the projections that read it; fairseq's dropout, whose CPU mask is
kept in the model's dtype) and the loss on the whole summary's logits (``--loss-chunk-tokens
0``); ``fused`` is fused attention; ``recomputed`` also folds the feed-forward's activation into
``fc2`` (``modules/feed_forward.py``: backward computes it again); ``chunked`` takes the loss
``--loss-chunk-tokens`` summary tokens at a time as well; ``norms`` computes the layer norms'
outputs again in backward (``modules/layer_norm.py``); ``masks``, the default, keeps bool dropout
masks (``modules/dropout.py``). ``--dtype bf16`` shows the precision that training on a GPU
uses, where the fp32 copy of the probabilities weighs three times a bf16 activation.

    python -m benchmarks.memory_breakdown --dtype fp32 [--time-repeats 4]
    python -m benchmarks.memory_breakdown --dtype bf16 --heads 1
"""

import argparse
import contextlib
import sys
import time
from dataclasses import replace
from typing import Dict, List

import torch
from torch.distributed._tools.mem_tracker import MemTracker, _ModState, _MemRefType

from benchmarks.common import ModelSize, build_model, criterion_step, markdown_table, paged_source, start, summary_io
from pagesum_plugin.architectures import ARCHITECTURES, LOSS_CHUNK_TOKENS
from pagesum_plugin.modules.dropout import BoolMaskDropout
from pagesum_plugin.modules.feed_forward import ActivationLinear
from benchmarks.reference.modules import reference_attention
from pagesum_plugin.modules.layer_norm import RecomputedLayerNorm
from pagesum_recipes.profiling import peak_memory

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
ALL = None  # reference_attention's ``only``: every module with a path of before
STEPS = {  # name: (the modules on their path of before: ALL, or these classes; whether the loss is chunked)
    "before": (ALL, False),
    "fused": ((ActivationLinear, RecomputedLayerNorm, BoolMaskDropout), False),
    "recomputed": ((RecomputedLayerNorm, BoolMaskDropout), False),
    "chunked": ((RecomputedLayerNorm, BoolMaskDropout), True),
    "norms": ((BoolMaskDropout,), True),
    "masks": ((), True),
}
STEP_LABELS = {"before": "before", "fused": "fused attention", "recomputed": "+ activation recomputed",
               "chunked": "+ chunked loss", "norms": "+ layer norms recomputed", "masks": "+ bool dropout masks"}
PART_STEPS = ("before", "masks")  # the per-module table: every change of the layer, or none
BART_BASE = ARCHITECTURES["bart_base"]
MB = 2**20
# one decoder layer's sub-modules in forward order, and what each is charged with: the
# activations kept from its forward's start to the next one's (the functions between modules,
# such as the activation function, dropout and the residual sum, go to the module before them)
DECODER_PARTS = {
    "self_attn": "self-attention, dropout, residual",
    "self_attn_layer_norm": "layer norm",
    "encoder_attn": "cross-attention, dropout, residual",
    "encoder_attn_layer_norm": "layer norm",
    "fc1": "feed-forward in + activation (ffn wide)",
    "activation_dropout_module": "activation dropout",
    "fc2": "feed-forward out, dropout, residual",
    "final_layer_norm": "final layer norm",
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", choices=DTYPES, default="fp32")
    parser.add_argument("--pages", type=int, default=7)
    parser.add_argument("--page-len", type=int, default=512)
    parser.add_argument("--tgt-len", type=int, default=512, help="summary tokens")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--heads", type=int, default=BART_BASE.heads,
                        help="attention heads of 64 dimensions; the width is 64 x heads, the feed-forward 4 x that "
                             "(default 12: bart.base). Every per-layer tensor grows with the heads at this "
                             "head size, so --heads 1 keeps bart.base's per-layer proportions at 1/12 of its size")
    parser.add_argument("--loss-chunk-tokens", type=int, default=LOSS_CHUNK_TOKENS,
                        help=f"summary tokens per chunk of the chunked loss (default: the criterion's, {LOSS_CHUNK_TOKENS})")
    parser.add_argument("--check-layers", type=int, default=0, metavar="N",
                        help="also measure the N-layer step of each kind, against fixed + N x layer (0: do not)")
    parser.add_argument("--time-repeats", type=int, default=0, metavar="N",
                        help="also time each kind of step at 2 layers, the kinds taking turns, best of N (0: do not)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="tiny widths and lengths, for a smoke run")
    args = parser.parse_args(argv)
    args.device = "cpu"
    return args


def size_of(args, layers: int) -> ModelSize:
    """``bart.base`` at ``layers`` layers and ``args.heads`` heads of its head width (``--quick``:
    the tiny architecture at ``layers`` layers)."""
    if args.quick:
        return ModelSize.of(replace(ARCHITECTURES["tiny"], layers=layers))
    width = BART_BASE.embed_dim // BART_BASE.heads * args.heads
    return ModelSize.of(replace(BART_BASE, layers=layers, embed_dim=width, heads=args.heads,
                                ffn_dim=BART_BASE.ffn_dim // BART_BASE.embed_dim * width))


def layers_of(model: torch.nn.Module, step: str):
    """The layers as ``step`` runs them: the modules it names (``STEPS``) on their path of before."""
    reverted, _ = STEPS[step]
    return reference_attention(model, only=reverted) if reverted != () else contextlib.nullcontext(model)


def build(args, layers: int):
    """PageSum at ``layers`` encoder+decoder layers, in ``args.dtype``, and its inputs: (task, model,
    src (1, pages, page_len), target (1, tgt_len), prev_output_tokens (1, tgt_len))."""
    torch.manual_seed(args.seed)
    task, model = build_model("pagesum_bart_large", size_of(args, layers), "--max-source-positions",
                              str(args.page_len), "--max-target-positions", str(max(1024, args.tgt_len)))
    model = model.to(DTYPES[args.dtype])
    dictionary = task.source_dictionary
    generator = torch.Generator().manual_seed(args.seed + 1)
    target, prev_output_tokens = summary_io(dictionary, 1, args.tgt_len, generator)
    src = paged_source(dictionary, 1, args.pages, args.page_len, generator)
    return task, model, src, target, prev_output_tokens


def step_peaks(args, task, model, src, target, prev_output_tokens) -> Dict[str, float]:
    """{step (``STEPS``): the training step's peak MB on top of the weights}."""
    peaks = {}
    for name, (_, chunked) in STEPS.items():
        step = criterion_step(model, task, src, target, prev_output_tokens, args.loss_chunk_tokens if chunked else 0)
        with layers_of(model, name):
            step()  # warm-up: lazily built buffers do not count
            model.zero_grad(set_to_none=True)
            peaks[name] = peak_memory(step, torch.device("cpu"), [model]).added / MB
            model.zero_grad(set_to_none=True)
    return peaks


def step_seconds(args, task, model, src, target, prev_output_tokens) -> Dict[str, float]:
    """{step: the best of ``args.time_repeats`` timed steps}, the kinds taking turns (reversed every other round)."""
    best = {name: float("inf") for name in STEPS}
    for round_ in range(args.time_repeats):
        for name in (list(STEPS) if round_ % 2 == 0 else list(reversed(STEPS))):
            _, chunked = STEPS[name]
            step = criterion_step(model, task, src, target, prev_output_tokens, args.loss_chunk_tokens if chunked else 0)
            with layers_of(model, name):
                model.zero_grad(set_to_none=True)
                started = time.perf_counter()
                step()
                best[name] = min(best[name], time.perf_counter() - started)
    model.zero_grad(set_to_none=True)
    return best


def activations(stats, state) -> int:
    """Bytes of live activations in a module's first ``state`` snapshot (MemTracker)."""
    return stats.snapshots[state][0][torch.device("cpu")].get(_MemRefType.ACT, 0)


def decoder_layer_parts(model, src, prev_output_tokens) -> Dict[str, Dict[str, float]]:
    """{step (``PART_STEPS``): {part: activation MB that the last decoder layer's sub-module keeps}}
    (forward only; the last layer of two reads a layer norm's output, as every layer but the first)."""
    parts: Dict[str, Dict[str, float]] = {}
    layer = f"decoder.layers.{len(model.decoder.layers) - 1}"
    for name in PART_STEPS:
        with layers_of(model, name):
            tracker = MemTracker()
            tracker.track_external(model)
            with tracker:
                logits, _ = model(src, None, prev_output_tokens)
            starts = {}  # sub-module (or "end") -> live activations when its forward began
            for stats in tracker.memory_tracking.values():
                prefix, _, part = stats.mod_fqn.rpartition(".")
                if stats.mod_fqn.endswith(layer):
                    starts["end"] = activations(stats, _ModState.POST_FW)
                elif prefix.endswith(layer) and part in DECODER_PARTS:
                    starts[part] = activations(stats, _ModState.PRE_FW)
            order = [*DECODER_PARTS, "end"]
            parts[name] = {part: (starts[after] - starts[part]) / MB for part, after in zip(order, order[1:])}
            del logits
    return parts


def render(args, peaks, parts, seconds=None) -> str:
    per_layer = {name: peaks[name][2] - peaks[name][1] for name in STEPS}
    fixed = {name: peaks[name][1] - per_layer[name] for name in STEPS}
    full = {name: fixed[name] + BART_BASE.layers * per_layer[name] for name in STEPS}
    lines = [("fixed (embeddings, logits)", fixed), ("one encoder + decoder layer", per_layer),
             (f"{BART_BASE.layers} layers: fixed + {BART_BASE.layers} x layer", full)]
    if args.check_layers:
        lines.append((f"{args.check_layers} layers, measured", {name: peaks[name][args.check_layers] for name in STEPS}))
    rows = [[label] + [f"{values[name]:.0f}" for name in STEPS] for label, values in lines]
    ratio_rows = [[label] + [f"{values[name] / values['before']:.2f}x" for name in STEPS] for label, values in lines]
    part_rows = [[DECODER_PARTS[part]] + [f"{parts[name].get(part, 0):.0f}" for name in PART_STEPS]
                 for part in DECODER_PARTS]
    part_rows.append(["all of the above"] + [f"{sum(parts[name].values()):.0f}" for name in PART_STEPS])
    heading = (f"PageSum training step, {args.pages} pages x {args.page_len} tokens, a {args.tgt_len}-token summary, "
               f"{args.dtype}, d={size_of(args, 1).embed_dim}, {size_of(args, 1).heads} heads; chunked loss: "
               f"{args.loss_chunk_tokens} tokens a chunk; torch {torch.__version__}, CPU, MemTracker")
    timing = []
    if seconds:
        timing = [f"Step time at 2 layers, s (best of {args.time_repeats}, the kinds taking turns):",
                  markdown_table(["", *STEP_LABELS.values()],
                                 [["seconds"] + [f"{seconds[name]:.2f}" for name in STEPS],
                                  ["/ before"] + [f"{seconds[name] / seconds['before']:.2f}x" for name in STEPS]])]
    return "\n\n".join([
        heading,
        "Step peak on top of the weights, MB (measured at 1 and 2 layers):",
        markdown_table(["", *STEP_LABELS.values()], rows),
        "The same, against before:",
        markdown_table(["", *STEP_LABELS.values()], ratio_rows),
        "Activations the second of two decoder layers keeps for backward, MB (forward):",
        markdown_table(["decoder layer part", "before", "now (every change)"], part_rows),
        *timing,
    ])


def main(argv=None):
    args = parse_args(argv)
    start(args)
    if args.quick:
        args.pages, args.page_len, args.tgt_len, args.loss_chunk_tokens = 2, 32, 16, 4
    peaks: Dict[str, Dict[int, float]] = {name: {} for name in STEPS}  # step -> layers -> MB
    seconds = None
    for layers in sorted({1, 2, args.check_layers} - {0}):
        task, model, src, target, prev_output_tokens = build(args, layers)
        for name, mb in step_peaks(args, task, model, src, target, prev_output_tokens).items():
            peaks[name][layers] = mb
            print(f"{layers} layer(s), {name}: {mb:.0f} MB", file=sys.stderr, flush=True)
        if layers == 2:
            parts = decoder_layer_parts(model, src, prev_output_tokens)
            if args.time_repeats:
                seconds = step_seconds(args, task, model, src, target, prev_output_tokens)
    print(render(args, peaks, parts, seconds))


if __name__ == "__main__":
    main()
