"""A stand-in on the CPU for ``torch.cuda.make_graphed_callables``: its replays' memory and host
work, without a graph. As there, each call copies its inputs into the first call's tensors
(where they are other tensors), the graph's work writes the outputs into the same buffers every
time, and backward writes the gradients into the same buffers and hands autograd a view of each;
the graph's work (the module, eager, and its gradients) runs inside a profiler region named
``REPLAYED``, so that an operator count can leave it out as it leaves out a compiled region
(``compiled_training.outside_compiled``). What torch's graphed function does on the host
(the copies in, a view of every output and gradient) runs outside it. The tests of the captured
training step (``tests/test_training_capture.py``) and ``benchmarks.compiled_training`` use it
where there is no GPU."""

from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_flatten, tree_unflatten

REPLAYED = "graph replay (stand-in)"


def capture_options(device: torch.device) -> Dict[str, object]:
    """``CapturedTraining``'s options on ``device``: its own (the real graphs) on CUDA, this
    stand-in on the CPU."""
    return {} if device.type == "cuda" else {"capture": static_buffers, "device": "cpu", "new_pool": StandInPool}


class StandInPool:
    """A memory pool's handle where there is none: what ``static_buffers`` is handed."""


def static_buffers(module: nn.Module, sample_args: Tuple[Tensor, ...], pool: StandInPool) -> Callable:
    """``module`` as ``make_graphed_callables`` would give it, ``pool`` taken and left unused: the
    CPU has no memory pools."""
    parameters = tuple(module.parameters())
    static_inputs = tuple(sample_args)
    outputs: List[Tensor] = []  # the static outputs, made at the first call
    grads: List[Optional[Tensor]] = []  # a static gradient per parameter that wants one, made at the first backward
    state = {"spec": None, "leaves": None}

    class Replayed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            for static, given in zip(static_inputs, inputs):
                if static.data_ptr() != given.data_ptr():
                    static.copy_(given)
            with torch.profiler.record_function(REPLAYED), torch.enable_grad():
                leaves, state["spec"] = tree_flatten(module(*static_inputs))
                if not outputs:
                    outputs.extend(torch.empty_like(leaf) for leaf in leaves)
                for buffer, leaf in zip(outputs, leaves):
                    buffer.copy_(leaf.detach())
            state["leaves"] = leaves
            return tuple(buffer.detach() for buffer in outputs)

        @staticmethod
        def backward(ctx, *output_grads):
            leaves = state["leaves"]
            wanted = [p for p in parameters if p.requires_grad]
            with torch.profiler.record_function(REPLAYED):
                pairs = [(leaf, g) for leaf, g in zip(leaves, output_grads) if leaf.requires_grad and g is not None]
                computed = torch.autograd.grad([leaf for leaf, _ in pairs], wanted, [g for _, g in pairs],
                                               allow_unused=True)
                if not grads:
                    grads.extend(None if g is None else torch.empty_like(g) for g in computed)
                for buffer, g in zip(grads, computed):
                    if buffer is not None and g is not None:
                        buffer.copy_(g)
            handed = iter(grads)
            result = [None] * len(static_inputs)
            for p in parameters:
                buffer = next(handed) if p.requires_grad else None
                result.append(None if buffer is None else buffer.detach())
            return tuple(result)

    def call(*args):
        return tree_unflatten(list(Replayed.apply(*args, *parameters)), state["spec"])

    return call
