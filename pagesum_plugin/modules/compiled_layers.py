"""Layers compiled by ``torch.compile``, every layer of a stack sharing one set of graphs: the
decoder's for decoding (``--compile-decoder``), the encoder's and the decoder's for training
(``--compile-layers``).

In training, the layers of a stack have the same code and shapes: torch.compile traces the
parameters as inputs, so one forward graph and one backward graph serve the whole stack. A
compiled layer keeps nothing for the plugin's layer-norm recomputation
(``modules/layer_norm.py``): the compiler's partitioner decides what backward computes again.

fairseq's attention modules keep their decoding state in the search's ``incremental_state``
dict under keys made of a random id per module (``FairseqIncrementalState``). torch.compile
guards on every string a graph reads, so each layer of a stack would compile graphs of its own
(two or three: the first step, the later ones), all on the single code object of the layer
class's ``forward``, whose recompile limit (8) is reached by the fourth layer: the layers after
that ran eager, with a warning. Here each compiled call sees its layer's entries under keys
named by the module's place in the layer (``layer_state_0.attn_state``: the same in every
layer), so that one set of graphs serves a stack of any depth; after the call the entries go
back under their real keys, so that beam reordering, page pruning and everything else outside
the layer see the dict as it always was.

The floats a layer reads from its modules (attention scalings, dropout probabilities) are
constants of its graphs (``compiled``). torch.compile's default makes each one an input of the
graph, wrapped in a new 0-dim tensor at every call: on torch 2.11, four host operators a float,
seven floats a layer.
"""

import inspect
from typing import Callable, Dict, Iterable, List, Optional, Tuple, Union

import torch
from fairseq.incremental_decoding_utils import FairseqIncrementalState
from torch import nn

STATE_ID = "layer_state_{}"  # a stateful module's id inside a compiled call: its place among the layer's


def compile_decoder_layers(model: nn.Module, backend: Union[str, Callable] = "inductor") -> int:
    """Compile each decoder layer with ``torch.compile`` (in place; once per model): a
    decoding step's attention and feed-forward run as fused kernels, with the cache's length
    a symbolic size, so that a search compiles once rather than once per step, and once for
    the stack rather than once per layer. The decoder's bookkeeping around the layers (page
    layout, mixing, beam reordering) stays eager. The first search pays the compilation
    (BENCHMARKS.md). Returns how many layers were compiled now."""
    return compile_layers(model.decoder.layers, backend)


def compile_model_layers(model: nn.Module, backend: Union[str, Callable] = "inductor") -> int:
    """Compile every encoder and decoder layer of ``model`` (in place; once per model), for
    training: embeddings, page mixing, the output projection and the loss stay eager. Returns
    how many layers were compiled now."""
    return compile_layers([*model.encoder.layers, *model.decoder.layers], backend)


def compile_layers(layers: Iterable[nn.Module], backend: Union[str, Callable] = "inductor") -> int:
    """Compile each of ``layers`` (those not compiled yet), with dynamic shapes."""
    count = 0
    for layer in layers:
        if getattr(layer, "_compiled_call_impl", None) is None:
            # nn.Module's __call__ runs _compiled_call_impl when it is set (as Module.compile sets it)
            graphs = compiled(layer._call_impl, dynamic=True, backend=backend)
            layer._compiled_call_impl = SharedGraphCall(layer, graphs)
            count += 1
    return count


def compiled(fn: Callable, **options) -> Callable:
    """``torch.compile(fn, **options)``, with every float its graphs read from a module a
    constant of the graph rather than an input made at every call (a module's float that
    changes compiles a graph of its own).

    The setting is dynamo's, read when a call compiles, which any call may do (a new shape, a
    module switched to eval): every call runs under it. One patch serves every call: making a
    patch costs the host several times what entering one does, and a compiled call adds about
    40 us instead of 90 (docs/benchmarks/compiled_training.md)."""
    graphs = torch.compile(fn, **options)
    constant_floats = torch._dynamo.config.patch(specialize_float=True)

    def call(*args, **kwargs):
        # traced into from an enclosing compiled function, which decides; or inside a call that set it
        if torch.compiler.is_compiling() or torch._dynamo.config.specialize_float:
            return graphs(*args, **kwargs)
        with constant_floats:
            return graphs(*args, **kwargs)

    return call


class SharedGraphCall:
    """One layer's compiled call, with the layer's decoding state under layer-independent keys."""

    def __init__(self, layer: nn.Module, compiled: Callable):
        self.compiled = compiled
        self.signature = inspect.signature(layer.forward)
        # every module of the layer that keeps decoding state, its own id and its id inside a compiled call
        self.stateful: List[Tuple[nn.Module, str, str]] = [
            (module, module._incremental_state_id, STATE_ID.format(i))
            for i, module in enumerate(m for m in layer.modules() if isinstance(m, FairseqIncrementalState))
        ]
        self.local_id = {real: local for _, real, local in self.stateful}
        self.real_id = {local: real for _, real, local in self.stateful}

    def __call__(self, *args, **kwargs):
        call = self.signature.bind(*args, **kwargs)
        state = call.arguments.get("incremental_state")
        if state is None:  # training or a full forward pass: no keys to translate, but fairseq reads the ids
            for module, _, local_id in self.stateful:
                module._incremental_state_id = local_id
            try:
                return self.compiled(*args, **kwargs)
            finally:
                for module, real_id, _ in self.stateful:
                    module._incremental_state_id = real_id
        renamed = [(key, _renamed(key, self.local_id)) for key in state]
        local = {new: state.pop(key) for key, new in renamed if new is not None}
        call.arguments["incremental_state"] = local
        for module, _, local_id in self.stateful:
            module._incremental_state_id = local_id
        try:
            return self.compiled(*call.args, **call.kwargs)
        finally:
            for module, real_id, _ in self.stateful:
                module._incremental_state_id = real_id
            for key, value in local.items():
                state[_renamed(key, self.real_id)] = value


def _renamed(key: str, ids: Dict[str, str]) -> Optional[str]:
    """fairseq's state key ``key`` ("{module id}.{name}"; neither uuids nor ``STATE_ID`` hold a
    dot) under the id ``ids`` gives its module, or None for a module ``ids`` does not name."""
    module_id, _, name = key.partition(".")
    return f"{ids[module_id]}.{name}" if module_id in ids else None
