"""Layer-norm outputs computed again in backward instead of kept.

BART's layers are post-LN: every sub-layer ends in a layer norm, and its output is what the
next sub-layer's projections read (the query, key and value projections, the cross-attention's
query, ``fc1``; at the end of the encoder, every decoder layer's cross-attention keys and
values; at the end of the decoder, the page mixing). Autograd keeps that output, one d-wide
tensor per token, for those projections' weight gradients, while the layer norm's own backward
keeps its input. Computing the output again from that input costs one normalisation in
backward and keeps one d-wide tensor per layer norm less: three per decoder layer, two per
encoder layer.

``RecomputedLayerNorm`` (every ``nn.LayerNorm`` of a model, ``recompute_layer_norms``) records,
in training, each output it computes with the input it came from. While the model's forward
runs (``norm_outputs_recomputed``), a saved-tensors hook hands every operation that saves such
an output, or a view of it, a handle that computes it again from that input when backward
unpacks it. The same kernel on the same input and parameters gives the same output bit for
bit, so every gradient is the one of the layer norm kept; a handle refuses to compute after
its input or parameters were changed in place, as autograd refuses to use a modified saved
tensor. Nothing is recorded without gradients (decoding), under autocast (the consumers then
keep a cast copy, not the output), inside another saved-tensors hook (such as torch's ``save_on_cpu``),
whose choice of what to keep then stands, or in a layer compiled by ``torch.compile``, whose
partitioner chooses what backward computes again. The parameters keep their names:
checkpoints do not change.
"""

import contextlib
import functools
import threading
import weakref
from typing import Dict, Iterator, Optional, Tuple

import torch
from torch import Tensor, nn

from .swap import swap_modules

_recording = threading.local()  # .outputs: the NormOutputs of the forward running in this thread, or None


class RecomputedLayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` whose output, in training, is computed again in backward where kept."""

    def forward(self, x: Tensor) -> Tensor:
        y = super().forward(x)  # (..., dim)
        if torch.compiler.is_compiling():  # a compiled layer: its partitioner decides what backward recomputes
            return y
        outputs: Optional[NormOutputs] = getattr(_recording, "outputs", None)
        if (outputs is not None and y.requires_grad
                and not torch.is_autocast_enabled(x.device.type)):
            outputs.record(self, x, y)
        return y


class _Recomputed:
    """What a saving operation keeps in place of a layer norm's output: the norm, its input
    (kept by the norm's own backward anyway) and the geometry of the view that was saved."""

    __slots__ = ("norm", "x", "versions", "size", "stride", "offset")

    def __init__(self, norm: RecomputedLayerNorm, x: Tensor, saved: Tensor):
        self.norm, self.x = norm, x.detach()  # the data only: x's grad_fn would tie the graph into a cycle
        self.versions = _versions(norm, x)
        self.size, self.stride, self.offset = saved.size(), saved.stride(), saved.storage_offset()

    def tensor(self) -> Tensor:
        if _versions(self.norm, self.x) != self.versions:
            raise RuntimeError("a layer norm's input or parameters were modified in place after forward: its "
                               "output, which backward needs, cannot be computed again")
        with torch.no_grad():
            y = nn.LayerNorm.forward(self.norm, self.x)  # the forward's output, bit for bit
        return y.as_strided(self.size, self.stride, self.offset)


def _versions(norm: nn.LayerNorm, x: Tensor) -> Tuple[int, ...]:
    return tuple(t._version for t in (x, norm.weight, norm.bias) if t is not None)


class NormOutputs:
    """The layer-norm outputs of one forward pass, by storage, and the hooks that hand their
    savers a ``_Recomputed`` instead. An output is matched only while it is alive (a weak
    reference), so a storage freed and reused is never mistaken for it."""

    def __init__(self):
        # output storage's address -> (the output, weakly; its norm; its input)
        self._sources: Dict[int, Tuple[weakref.ref, RecomputedLayerNorm, Tensor]] = {}

    def record(self, norm: RecomputedLayerNorm, x: Tensor, y: Tensor) -> None:
        if y.numel() > 0 and y.storage_offset() == 0 and y.is_contiguous():  # as_strided rebuilds any view of it
            self._sources[y.untyped_storage().data_ptr()] = (weakref.ref(y), norm, x)

    def pack(self, saved: Tensor):
        if type(saved) is not torch.Tensor or saved.layout != torch.strided:  # parameters, subclasses
            return saved
        source = self._sources.get(saved.untyped_storage().data_ptr())
        output = source and source[0]()
        if output is None or output.dtype != saved.dtype or output.device != saved.device:
            # Kept detached: an operation that saves its own output would otherwise hold a tensor
            # whose grad_fn is that operation, a cycle through autograd's nodes that Python's
            # collector cannot see, and a forward never followed by backward (one that ran out of
            # memory) would keep its whole graph alive. A tensor without grad_fn closes no cycle.
            return saved if saved.grad_fn is None else saved.detach()
        _, norm, x = source
        return _Recomputed(norm, x, saved)

    @staticmethod
    def unpack(packed):
        return packed.tensor() if isinstance(packed, _Recomputed) else packed

    def clear(self) -> None:
        self._sources.clear()


def _hooks_free() -> bool:
    """Whether this thread may install saved-tensors hooks of its own: hooks are enabled and no
    other pair is active (only the innermost pair runs, so ours would override it)."""
    autograd = torch._C._autograd  # no public query for either (torch 2.x); without one, assume not free
    disabled = getattr(autograd, "_saved_tensors_hooks_get_disabled_error_message", None)
    top = getattr(autograd, "_top_saved_tensors_default_hooks", None)
    return disabled is not None and top is not None and disabled() is None and top(False) is None


@contextlib.contextmanager
def norm_outputs_recomputed() -> Iterator[None]:
    """While this runs, what saves a ``RecomputedLayerNorm``'s output keeps a handle that
    computes it again in backward. A no-op without gradients, when nested, and inside
    another saved-tensors hook."""
    if not torch.is_grad_enabled() or getattr(_recording, "outputs", None) is not None or not _hooks_free():
        yield
        return
    outputs = NormOutputs()
    _recording.outputs = outputs
    try:
        with torch.autograd.graph.saved_tensors_hooks(outputs.pack, outputs.unpack):
            yield
    finally:
        _recording.outputs = None
        outputs.clear()  # the handles keep what backward needs; the inputs are not held here


def recomputing_norms(forward):
    """Decorate a model's ``forward``: its layer norms' outputs are computed again in backward."""

    @functools.wraps(forward)
    def wrapped(*args, **kwargs):
        with norm_outputs_recomputed():
            return forward(*args, **kwargs)

    return wrapped


def recompute_layer_norms(model: nn.Module) -> int:
    """Make every ``nn.LayerNorm`` of ``model`` (exactly that class: apex's fused one is left
    as it is) a ``RecomputedLayerNorm`` with the same parameters, under the same names.
    Returns how many were replaced."""
    return swap_modules(model, nn.LayerNorm, _recomputed)


def _recomputed(norm: nn.LayerNorm) -> RecomputedLayerNorm:
    # built on the meta device (no weights of its own), then given the norm's parameters
    recomputed = RecomputedLayerNorm(norm.normalized_shape, eps=norm.eps, elementwise_affine=norm.elementwise_affine,
                                     bias=norm.bias is not None, device="meta")
    recomputed.weight, recomputed.bias = norm.weight, norm.bias
    return recomputed
