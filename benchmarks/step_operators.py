"""The operators a decoding step launches from the host: the step loop, against the search with
fixed shapes whose step a CUDA graph captures (``generation/static_search.py``).

Every operator that eager PyTorch dispatches costs the host 10 to 15 us to launch (on the H100,
docs/benchmarks/gpu.md); a captured step is launched once. A beam search of ``--steps`` and of
twice as many tokens (forced lengths) runs under a dispatch counter, at each decoder depth of
``--layers``; a step's count is the difference over the steps between them, so the encoder
and the first step cancel. For the fixed shapes it is split into the operators inside the
step function (what the graph replays) and outside it (what the host still dispatches between
two replays). Weights are random; the counts do not depend on them, nor on the device.

    python -m benchmarks.step_operators
"""

import argparse
from dataclasses import replace
from typing import Dict

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.beam_cache import generator_for
from benchmarks.common import ModelSize, add_device_args, build_model, describe_device, markdown_table, paged_source, \
    runs_a_kernel, start
from benchmarks.generation_speed import net_input
from pagesum_plugin.architectures import ARCHITECTURES


class Dispatched(TorchDispatchMode):
    """Operators dispatched inside a step function (``runner``) and outside it, those of them
    inside that run a kernel, and the names of those inside."""

    def __init__(self):
        super().__init__()
        self.inside, self.outside, self.kernels, self.in_step, self.names = 0, 0, 0, False, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.in_step:
            self.inside += 1
            self.kernels += runs_a_kernel(func)
            self.names.add(func._schema.name.split("::")[-1])
        else:
            self.outside += 1
        return func(*args, **(kwargs or {}))

    def runner(self, step):
        def counted():
            self.in_step = True
            try:
                step()
            finally:
                self.in_step = False
        return counted


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 6, 12], help="decoder depths (bart.large: 12)")
    parser.add_argument("--steps", type=int, default=6, help="the shorter search's tokens; the longer has twice")
    parser.add_argument("--beam", type=int, default=4)
    return parser.parse_args(argv)


def count(args, layers: int, steps: int, fixed: bool, device) -> Dispatched:
    size = ModelSize.of(replace(ARCHITECTURES["tiny"], layers=layers))
    torch.manual_seed(args.seed)
    task, model = build_model("pagesum_bart_large", size, "--max-source-positions", "16", "--max-target-positions",
                              str(4 * args.steps), dropout=0.0)
    model.to(device).eval()
    sample = net_input(paged_source(task.dictionary, 2, 3, 16, torch.Generator().manual_seed(args.seed)).to(device),
                       task.dictionary.pad())
    counter = Dispatched()
    generator = generator_for(model, task.dictionary, args.beam, steps, shared=True,
                              decoding=counter.runner if fixed else "eager")
    with torch.no_grad(), counter:
        generator.generate([model], sample)
    return counter


def per_step(args, layers: int, fixed: bool, device) -> Dict[str, float]:
    short, long = (count(args, layers, n, fixed, device) for n in (args.steps, 2 * args.steps))
    return {name: (getattr(long, name) - getattr(short, name)) / args.steps for name in ("inside", "outside", "kernels")}


def main(argv=None):
    args = parse_args(argv)
    device, _ = start(args)
    print(f"Machine: {describe_device(device)}. PageSum, beam {args.beam}, 2 examples of 3 pages; operators per "
          f"decoding step, from searches of {args.steps} and {2 * args.steps} tokens.\n")
    rows, eager_by_depth = [], {}
    for layers in args.layers:
        loop = per_step(args, layers, False, device)
        fixed = per_step(args, layers, True, device)
        eager = eager_by_depth[layers] = loop["inside"] + loop["outside"]
        rows.append([layers, f"{eager:.0f}", f"{fixed['inside']:.0f}", f"{fixed['kernels']:.0f}",
                     f"{fixed['outside']:.0f}", f"{eager / max(fixed['outside'], 1):.0f}x"])
    print(markdown_table(["decoder layers", "step loop: operators / step", "fixed shapes: inside the graph",
                          "of them kernels", "fixed shapes: outside it", "fewer launches"], rows))
    if len(eager_by_depth) > 1:  # a step's operators: fixed + per layer x layers
        (few, few_ops), (many, many_ops) = min(eager_by_depth.items()), max(eager_by_depth.items())
        per_layer = (many_ops - few_ops) / (many - few)
        print(f"\nStep loop: {per_layer:.0f} operators per decoder layer, {few_ops - per_layer * few:.0f} per step besides.")


if __name__ == "__main__":
    main()
