"""What the host launches for one optimizer update, by fairseq's 16-bit wrapper and optimizer.

After backward, fairseq's trainer calls the optimizer three times an update: ``multiply_grads``
(by 1 / sample size), ``clip_grad_norm`` (at every update, even with ``--clip-norm 0``: it logs
the norm) and ``step``; and ``zero_grad`` before the next forward pass. Each call runs here
under a dispatch counter, on a bf16 PageSum whose parameter tensors are as many as
``bart.large``'s at ``--layers 12`` (the counts depend on the tensors, not on their widths).
Operators: every ATen operator the host dispatches; kernels: those of them that compute or copy
(the rest are views, which launch nothing on a GPU). On the GPU each kernel costs the host some
5 to 15 us to launch, and at batch 1 the host sets the pace of a training update
(docs/benchmarks/gpu.md).

    python -m benchmarks.update_operators
"""

import argparse
import time
from typing import Callable, Dict, List, Tuple

import torch

from benchmarks.common import (Launched, ModelSize, add_device_args, criterion_and_sample, describe_device,
                               markdown_table, start)
from benchmarks.scale.training import build_trainable, training_batch

# (what a row is called, fairseq's flags): the wrappers and optimizers the scale benchmark's rows train with
VARIANTS: List[Tuple[str, Tuple[str, ...]]] = [
    ("--bf16, adam", ("--optimizer", "adam")),
    ("--bf16, adamw_torch", ("--optimizer", "adamw_torch")),
    ("--memory-efficient-bf16, adamw_torch", ("--optimizer", "adamw_torch", "--memory-efficient-bf16")),
    ("--memory-efficient-bf16, adafactor", ("--optimizer", "adafactor", "--memory-efficient-bf16")),
    ("--memory-efficient-bf16, adafactor_batched", ("--optimizer", "adafactor_batched", "--memory-efficient-bf16")),
]
PHASES = ("zero_grad", "multiply_grads", "clip_grad_norm", "step")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--layers", type=int, default=12, help="encoder and decoder layers (bart.large: 12)")
    parser.add_argument("--clip-norm", type=float, default=0.1, help="as the recipes that clip (0: norm only)")
    parser.add_argument("--repeats", type=int, default=5, help="updates timed; the best is reported")
    return parser.parse_args(argv)


def phases(model, optimizer, task, device, clip_norm: float) -> Dict[str, Callable[[], None]]:
    """The optimizer's calls of one update of fairseq's trainer, after a forward and backward pass
    of one batch (7 pages of 16 tokens, a 64-token summary) that ``backward`` runs again."""
    criterion, sample = criterion_and_sample(task, *training_batch(task.dictionary, 1, 7, 16, 64, 0, device), 64)

    def backward():
        loss, sample_size, _ = criterion(model, sample)
        optimizer.backward(loss)
        return sample_size

    size = {}
    return {
        "zero_grad": optimizer.zero_grad,
        "backward": lambda: size.update(n=backward()),
        "multiply_grads": lambda: optimizer.multiply_grads(1.0 / size["n"]),
        "clip_grad_norm": lambda: optimizer.clip_grad_norm(clip_norm),
        "step": optimizer.step,
    }


def measure(args, flags: Tuple[str, ...], device) -> Dict:
    size = ModelSize(16, 64, args.layers, 2, 200)
    torch.manual_seed(args.seed)
    task, model, optimizer = build_trainable(size, 16, device, torch.bfloat16, *flags)
    calls = phases(model, optimizer, task, device, args.clip_norm)
    for call in calls.values():  # the first update makes the optimizer's state
        call()
    counted = {}
    for name, call in calls.items():  # in order; only the optimizer's calls under the counter
        if name not in PHASES:
            call()
            continue
        with Launched() as launched:
            call()
        counted[name] = launched
    best = float("inf")
    for _ in range(args.repeats):
        seconds = 0.0
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            seconds += (time.perf_counter() - started) if name in PHASES else 0.0
        best = min(best, seconds)
    return {"tensors": sum(1 for p in model.parameters() if p.requires_grad), "counted": counted, "seconds": best,
            "wrapper": f"{type(optimizer).__name__} ({type(optimizer.optimizer).__name__})"}


def main(argv=None):
    args = parse_args(argv)
    device, _ = start(args)
    rows, tensors = [], None
    for name, flags in VARIANTS:
        m = measure(args, flags, device)
        tensors = m["tensors"]
        counted = m["counted"]
        rows.append([name, m["wrapper"],
                     *(f"{counted[phase].operators} / {counted[phase].kernels}" for phase in PHASES),
                     sum(counted[phase].kernels for phase in PHASES), f"{m['seconds'] * 1e3:.1f}"])
    print(f"Machine: {describe_device(device)}. bf16 PageSum, {args.layers} + {args.layers} layers: {tensors} "
          f"parameter tensors; --clip-norm {args.clip_norm}. Each cell: operators / of them kernels, one update.\n")
    print(markdown_table(["flags", "wrapper (optimizer)", *PHASES, "kernels / update", "host ms (CPU)"], rows))


if __name__ == "__main__":
    main()
