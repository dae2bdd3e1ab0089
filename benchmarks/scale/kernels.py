"""Which attention kernels really ran: the aten ops seen inside each attention module."""

from collections import defaultdict
from typing import Dict, List, Optional, Set

from fairseq.modules import MultiheadAttention
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

KERNEL_NAMES = {  # aten op seen inside an attention module -> kernel
    "_scaled_dot_product_flash_attention": "SDPA flash",
    "_scaled_dot_product_flash_attention_for_cpu": "SDPA flash (CPU)",
    "_scaled_dot_product_efficient_attention": "SDPA memory-efficient",
    "_scaled_dot_product_cudnn_attention": "SDPA cuDNN",
    "bmm": "bmm + softmax",
    "baddbmm": "bmm + softmax",
}


def attention_role(name: str) -> str:
    if "encoder_attn" in name:
        return "cross-attention"
    return "encoder self-attention" if name.startswith("encoder.") else "decoder self-attention"


class AttentionKernels(TorchDispatchMode):
    """Records the attention aten ops (fused SDPA kernels, or bmm of the unfused path) that run
    inside each of a model's attention modules, by role (encoder self-, decoder self-,
    cross-attention), in the forward passes (and checkpointing's recomputations) of a call."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.modules = {module: attention_role(name) for name, module in model.named_modules()
                        if isinstance(module, MultiheadAttention)}
        self.seen: Dict[str, Set[str]] = defaultdict(set)
        self.role: Optional[str] = None
        self.hooks: List = []

    def __enter__(self):
        for module, role in self.modules.items():
            self.hooks.append(module.register_forward_pre_hook(lambda m, a, role=role: setattr(self, "role", role)))
            self.hooks.append(module.register_forward_hook(lambda m, a, out: setattr(self, "role", None)))
        return super().__enter__()

    def __exit__(self, *exc):
        for hook in self.hooks:
            hook.remove()
        self.hooks.clear()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if self.role is not None and ("scaled_dot_product" in name or name in ("bmm", "baddbmm")):
            self.seen[self.role].add(KERNEL_NAMES.get(name, name))
        return func(*args, **(kwargs or {}))

    def describe(self) -> str:
        return "; ".join(f"{role}: {', '.join(sorted(kernels))}" for role, kernels in sorted(self.seen.items()))
