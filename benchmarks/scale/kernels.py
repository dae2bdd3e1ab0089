"""Which attention kernels really ran (the aten ops seen inside each attention module), and where
a call's device time goes (its kernels' own times under torch's profiler, by kind)."""

from collections import defaultdict
from typing import Callable, Dict, List, Optional, Set

import torch
from fairseq.modules import MultiheadAttention
from torch import nn
from torch._C._autograd import DeviceType
from torch.utils._python_dispatch import TorchDispatchMode

from pagesum_recipes.profiling import synchronize

# kinds of CUDA kernels (on the CPU, ATen operators), by what their names hold in lower case, the first
# that matches; the rest: "other"
KERNEL_KINDS = (("attention", ("flash", "fmha", "sdpa", "attention")),
                ("matmul", ("gemm", "nvjet", "xmma", "wgmma", "cublas", "cutlass", "aten::mm", "addmm", "bmm")),
                ("compiled", ("triton",)))
LONGEST = 10  # kernels listed by name in a record

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


# ---- where the device's time goes ------------------------------------------------------------------


def kernel_seconds(run: Callable[[], object], device: torch.device) -> Dict[str, float]:
    """The own seconds of every kernel ``run()`` launches, summed by name, from torch's profiler:
    CUDA kernels on CUDA (what the call would take if the host never kept the GPU waiting), ATen
    operators on the CPU."""
    cuda = device.type == "cuda"
    activity = torch.profiler.ProfilerActivity.CUDA if cuda else torch.profiler.ProfilerActivity.CPU
    synchronize(device)
    with torch.profiler.profile(activities=[activity]) as profile:
        run()
        synchronize(device)
    if cuda:  # a kernel has no children: its own time is its duration
        return durations(profile, DeviceType.CUDA)
    return {event.key: event.self_cpu_time_total * 1e-6 for event in profile.key_averages()  # us -> s
            if event.self_cpu_time_total > 0 and event.key.startswith("aten::")}


def durations(profile: torch.profiler.profile, device_type: DeviceType) -> Dict[str, float]:
    """The seconds of the profiled events on ``device_type``, summed by name, read from the raw
    events: ``key_averages`` first builds every event's tree in Python, which took 40 times as long
    (12 s for the 100,000 events of one 40-token search at 12 layers on a 2-core CPU)."""
    seconds: Dict[str, float] = defaultdict(float)
    for event in profile.profiler.kineto_results.events():
        if event.device_type() == device_type and event.duration_ns() > 0:
            seconds[event.name()] += event.duration_ns() * 1e-9
    return dict(seconds)


def kernel_record(seconds: Dict[str, float]) -> Dict:
    """``busy_s``, the kernels' seconds summed; ``kinds_s``, by kind (``KERNEL_KINDS``, then
    "other"); ``longest``, the ``LONGEST`` longest kernels, [name, seconds]."""
    kinds = dict.fromkeys([kind for kind, _ in KERNEL_KINDS] + ["other"], 0.0)
    for name, own in seconds.items():
        kind = next((kind for kind, marks in KERNEL_KINDS if any(mark in name.lower() for mark in marks)), "other")
        kinds[kind] += own
    longest = sorted(seconds.items(), key=lambda kernel: -kernel[1])[:LONGEST]
    return {"busy_s": sum(seconds.values()), "kinds_s": kinds, "longest": [[name[:120], own] for name, own in longest]}


def kind_shares(record: Optional[Dict]) -> str:
    """A record's kernel time by kind, as shares of its busy time: "20% / 50% / 20% / 10%"."""
    if not record or record["busy_s"] <= 0:
        return "-"
    return " / ".join(f"{own / record['busy_s']:.0%}" for own in record["kinds_s"].values())


KIND_HEADER = "kernel time: " + " / ".join([kind for kind, _ in KERNEL_KINDS] + ["other"])
