"""The feed-forward sublayer with its activation recomputed in backward.

fairseq's feed-forward is ``fc2(dropout(act(fc1(x))))``. Autograd keeps two ffn-wide tensors
per token for backward: ``fc1(x)``, which the activation's gradient reads, and ``act(fc1(x))``,
which ``fc2``'s weight gradient reads. Both are four times as wide as the model. In bf16,
fairseq's ``gelu`` runs in fp32, so its kept input is an fp32 copy: 6 bytes per element in all.

``fold_activation`` moves the activation into ``fc2``, an ``ActivationLinear``: forward computes
``W act(h) + b`` as before and keeps only ``h = fc1(x)``. Backward computes ``act(h)`` again (one
elementwise pass) for the weight gradient and frees it, then takes the activation's gradient
from ``h`` as autograd does (``gelu_backward``): every gradient is the one fairseq's layer gives,
and backward holds no more ffn-wide temporaries at once than fairseq's. That keeps one ffn-wide
tensor per token and layer instead of two (in bf16, 2 bytes per element instead of 6).

A layer is folded only where that is exact: an activation whose gradient follows from its
input alone (``ACTIVATION_GRADIENTS``: fairseq's ``gelu`` and ``relu``), no activation dropout
(BART's is 0) and no normalisation between the activation and ``fc2`` (NormFormer's
``ffn_layernorm``). Without gradients (decoding) and under autocast, ``fc2`` runs the two
operations as before. Inside a compiled layer (``--compile-layers``) ``fc2`` is a checkpointed
region instead: torch's partitioner, given the two operations, would keep ``act(h)`` as well,
since the weight gradient's matrix product must materialise it anyway. The parameters stay
``fc2.weight`` and ``fc2.bias``: checkpoints do not change.
"""

from typing import Callable, Dict, Optional

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint


def _gelu_gradient(grad: Tensor, h: Tensor) -> Tensor:
    """d gelu / dh, as autograd takes it through fairseq's ``gelu`` (fp32, then the input's dtype)."""
    return torch.ops.aten.gelu_backward(grad.float(), h.float()).to(h.dtype)


def _relu_gradient(grad: Tensor, h: Tensor) -> Tensor:
    return grad.masked_fill(h <= 0, 0)


# the activations that fold: elementwise, with their gradient from the input alone
ACTIVATION_GRADIENTS: Dict[str, Callable[[Tensor, Tensor], Tensor]] = {"gelu": _gelu_gradient, "relu": _relu_gradient}


def keep_input(x: Tensor) -> Tensor:
    """The activation a folded layer applies before ``fc2``: none (``fc2`` applies it)."""
    return x


class ActivationLinear(nn.Linear):
    """``fc2`` with the activation before it folded in: y = W act(h) + b, h kept for backward."""

    def __init__(self, in_features: int, out_features: int, activation: str, bias: bool = True, device=None,
                 dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = activation
        self.activation_fn: Callable[[Tensor], Tensor] = utils.get_activation_fn(activation)

    def forward(self, h: Tensor) -> Tensor:
        # h: (len, rows, ffn) -> (len, rows, dim)
        needs_grad = torch.is_grad_enabled() and (h.requires_grad or self.weight.requires_grad)
        if not needs_grad or torch.is_autocast_enabled(h.device.type):
            return self._unfolded(h)
        if torch.compiler.is_compiling():
            # A compiled layer's partitioner would keep act(h) too, since fc2's weight gradient must
            # materialise it: a checkpointed region keeps only its inputs and computes act(h) again
            return checkpoint(self._unfolded, h, use_reentrant=False)
        return _ActivationLinear.apply(h, self.weight, self.bias, self.activation)

    def _unfolded(self, h: Tensor) -> Tensor:
        """act(h) then fc2, as two operations."""
        return F.linear(self.activation_fn(h), self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation}"


class _ActivationLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h: Tensor, weight: Tensor, bias: Optional[Tensor], activation: str):
        ctx.activation = activation
        ctx.has_bias = bias is not None
        ctx.save_for_backward(h, weight)  # not act(h): backward computes it again
        return F.linear(utils.get_activation_fn(activation)(h), weight, bias)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        # grad_out: (..., dim); h: (..., ffn); weight: (dim, ffn)
        h, weight = ctx.saved_tensors
        needs_h, needs_weight, needs_bias, _ = ctx.needs_input_grad
        flat_grad = grad_out.reshape(-1, grad_out.size(-1))  # (tokens, dim)
        grad_h = grad_weight = grad_bias = None
        if needs_weight:  # act(h) exists only for this product: one ffn-wide temporary at a time
            grad_weight = flat_grad.t().mm(utils.get_activation_fn(ctx.activation)(h).reshape(-1, h.size(-1)))
        if needs_bias and ctx.has_bias:
            grad_bias = flat_grad.sum(dim=0)  # (dim,)
        if needs_h:
            grad_h = ACTIVATION_GRADIENTS[ctx.activation](grad_out.matmul(weight), h)  # (..., ffn)
        return grad_h, grad_weight, grad_bias, None


def fold_activation(layer: nn.Module, activation: str) -> bool:
    """Fold ``layer``'s activation into its ``fc2`` where that is exact (module docstring);
    ``activation`` is the layer's ``--activation-fn``. Returns whether it was folded. Layers
    that are not fairseq transformer layers (an FSDP wrapper, for one) are left as they are."""
    if not isinstance(layer, (TransformerEncoderLayerBase, TransformerDecoderLayerBase)):
        return False
    fc2 = layer.fc2
    if (activation not in ACTIVATION_GRADIENTS or layer.activation_dropout_module.p > 0
            or getattr(layer, "ffn_layernorm", None) is not None or type(fc2) is not nn.Linear
            or fc2._forward_pre_hooks):  # quantization noise
        return False
    # built on the meta device (no weights of its own allocated or initialised), then given fc2's
    folded = ActivationLinear(fc2.in_features, fc2.out_features, activation, bias=fc2.bias is not None,
                              device="meta")
    folded.weight, folded.bias = fc2.weight, fc2.bias  # the same parameters, under the same names
    layer.fc2 = folded
    layer.activation_fn = keep_input
    return True
