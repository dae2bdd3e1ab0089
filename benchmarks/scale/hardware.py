"""What a GPU can do at best: its bf16 dense matrix peak and its memory bandwidth, by name.

MFU divides by the first, the decoding bound by the second, and the cost estimates use both.
"""

import re
from dataclasses import dataclass
from typing import Optional

import torch

# (pattern of torch.cuda.get_device_name, bf16 dense FLOP/s, memory bandwidth B/s), first match wins
GPU_PEAKS = (
    (r"\bH100 PCIe", 756e12, 2.0e12),
    (r"\bH100 NVL", 835e12, 3.9e12),
    (r"\bH100\b", 989e12, 3.35e12),  # SXM: "NVIDIA H100 80GB HBM3"
    (r"\bH200\b", 989e12, 4.8e12),
    (r"\bA100\b.*80GB", 312e12, 2.0e12),
    (r"\bA100\b", 312e12, 1.555e12),  # 40GB
)
REFERENCE_GPU = "NVIDIA H100 80GB HBM3"  # what the estimates assume where the run's own GPU is unknown


@dataclass(frozen=True)
class Peaks:
    flops: Optional[float]  # bf16 dense FLOP/s; None: unknown
    bandwidth: Optional[float]  # bytes/s; None: unknown
    source: str  # where they came from, for the setup line

    def describe(self) -> str:
        flops = f"bf16 peak {self.flops / 1e12:.3g} TFLOP/s" if self.flops else "bf16 peak unknown"
        bandwidth = f"bandwidth {self.bandwidth / 1e12:.3g} TB/s" if self.bandwidth else "bandwidth unknown"
        return f"{flops}, {bandwidth} ({self.source})"


def peaks_by_name(name: str, tflops: Optional[float] = None, tbps: Optional[float] = None) -> Peaks:
    """The peaks of the GPU called ``name`` (``GPU_PEAKS``), each overridden by its option."""
    match = next(((f, b) for pattern, f, b in GPU_PEAKS if re.search(pattern, name)), (None, None))
    flops = tflops * 1e12 if tflops else match[0]
    bandwidth = tbps * 1e12 if tbps else match[1]
    source = f"GPU_PEAKS[{name}]" if match[0] else f"options ({name} not in GPU_PEAKS)"
    return Peaks(flops, bandwidth, source if not (tflops or tbps) else f"options, {source}")


def device_peaks(device: torch.device, tflops: Optional[float] = None, tbps: Optional[float] = None) -> Peaks:
    """The run's peaks: its GPU's, or on the CPU only what the options give."""
    if device.type == "cuda":
        return peaks_by_name(torch.cuda.get_device_name(device), tflops, tbps)
    return Peaks(tflops * 1e12 if tflops else None, tbps * 1e12 if tbps else None,
                 "CPU: only --peak-tflops / --peak-bandwidth")
