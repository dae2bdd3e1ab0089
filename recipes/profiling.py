"""What a call costs on a device: its wall time, its peak tensor memory, where it waits
for the device (``HostSyncs``), and which graphs torch.compile ran it on (``CountedGraphs``,
``count_calls``).

Shared by the benchmarks (``benchmarks/``) and the fit stage of the side-by-side comparison
(``recipes/comparison/fit.py``), which must measure memory the same way.
"""

import gc
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Union

import torch
from torch._dynamo.backends.registry import lookup_backend
from torch.distributed._tools.mem_tracker import MemTracker
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def describe_device(device) -> str:
    """The device a measurement ran on, for a table's caption: the GPU's name, or the CPU's
    thread count, and torch's version."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return f"CPU, {torch.get_num_threads()} threads, torch {torch.__version__}"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_seconds(fn: Callable[[], object], device: torch.device, repeats: int, warmup: int = 1) -> float:
    """Fastest wall time of ``fn`` over ``repeats`` runs after ``warmup`` untimed runs.

    The minimum rather than the mean: on a shared machine, other processes only ever
    make a run slower, so the fastest run is the least disturbed estimate."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return min(times)


@dataclass(frozen=True)
class PeakMemory:
    before: int  # bytes held when the call began (tracked weights, gradients, optimizer state)
    peak: int  # the most bytes held at once during the call, ``before`` included

    @property
    def added(self) -> int:
        """What the call itself needed on top of what was already there."""
        return self.peak - self.before


def peak_memory(fn: Callable[[], object], device: torch.device, tracked: Sequence[object] = (),
                root: Optional[torch.nn.Module] = None) -> PeakMemory:
    """Peak tensor memory of one call of ``fn`` on ``device``.

    CUDA: the caching allocator's own accounting (``max_memory_allocated``).
    CPU: torch has no allocator statistics for CPU tensors, so torch's ``MemTracker`` (a
    dispatch mode that follows every tensor storage created by an operator, forward and
    backward alike, until it is freed) sums the live storages after each operator, plus the
    ``tracked`` modules and optimizers made before the call (their weights, gradients and
    states). That is the CPU analogue of ``max_memory_allocated``: independent of the malloc
    implementation and of other processes, blind only to scratch buffers that a kernel
    allocates and frees inside itself.

    ``root``: a module that ``fn`` calls several times (AWESOME's criterion runs once per
    segment). MemTracker's per-module statistics assume one forward pass per module and call,
    so they are cleared before every forward of ``root``; the device-wide peak runs on across
    the whole call.
    """
    gc.collect()
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return PeakMemory(before, torch.cuda.max_memory_allocated(device))
    tracker = MemTracker()
    tracker.track_external(*tracked)
    # registered before the tracker's own global hooks, so it runs first
    hook = None
    if root is not None:
        hook = torch.nn.modules.module.register_module_forward_pre_hook(
            lambda module, args: tracker.reset_mod_stats() if module is root else None)
    try:
        with tracker:
            before = tracker.get_tracker_snapshot("current").get(device, {}).get("Total", 0)
            fn()
    finally:
        if hook is not None:
            hook.remove()
    return PeakMemory(before, tracker.get_tracker_snapshot("peak")[device]["Total"])


# How CUDA's libraries report an allocation they could not make: torch's caching allocator
# raises ``torch.cuda.OutOfMemoryError``; cuBLAS, cuDNN and the other libraries return a
# status that torch raises as a plain ``RuntimeError``; a raw CUDA call says "out of memory";
# the CPU allocator says it cannot allocate.
ALLOCATION_FAILURES = (
    "CUDA out of memory",
    "CUDA error: out of memory",
    "CUDA driver error: out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUFFT_ALLOC_FAILED",
    "CUSOLVER_STATUS_ALLOC_FAILED",
    "CUSPARSE_STATUS_ALLOC_FAILED",
    "can't allocate memory",
)
# Statuses that memory exhaustion causes among other things (cuDNN finds no algorithm whose
# workspace fits, cuBLAS cannot create its handle): out of memory only when they are raised
# while the device is nearly full.
EXHAUSTION_SYMPTOMS = (
    "CUDNN_STATUS_NOT_SUPPORTED",
    "CUDNN_STATUS_INTERNAL_ERROR",
    "CUDNN_STATUS_EXECUTION_FAILED",
    "CUBLAS_STATUS_NOT_INITIALIZED",
)
NEARLY_FULL = 0.9  # share of the device's memory in use at which a symptom above counts as exhaustion


def is_out_of_memory(error: BaseException, nearly_full: bool = False) -> bool:
    """Whether ``error`` means the device could not allocate what a call needed, i.e. the call
    does not fit, rather than a bug. ``nearly_full``: the device was nearly full when it was
    raised (``device_nearly_full``), which turns the ambiguous statuses into exhaustion."""
    if isinstance(error, torch.cuda.OutOfMemoryError):
        return True
    if not isinstance(error, RuntimeError):
        return False
    message = str(error)
    if any(failure in message for failure in ALLOCATION_FAILURES):
        return True
    return nearly_full and any(symptom in message for symptom in EXHAUSTION_SYMPTOMS)


def device_nearly_full(device) -> bool:
    """Whether at least ``NEARLY_FULL`` of the GPU's memory is in use now (by the driver's
    count: this process's allocator, its CUDA context, and everything else on the GPU).
    Always False on the CPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return False
    free, total = torch.cuda.mem_get_info(device)
    return (total - free) >= NEARLY_FULL * total


# operators whose result the host must wait for: a value read back, or a shape that depends on values
SYNCING_OPERATORS = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "_unique2", "is_nonzero"}
INDEXING_OPERATORS = {"index", "index_put", "index_put_"}  # sync when an index is a boolean mask


class HostSyncs(TorchDispatchMode):
    """Records every operator run inside it that makes the host wait for the device (on CUDA,
    a stream stall), with the innermost caller outside torch: ``seen`` is a list of
    (operator, "package/file.py:line"). ``repeat_interleave`` waits only when it is not told its
    output's size. ``Tensor.tolist``, which runs no operator on the CPU and reads the device on
    CUDA, is recorded as "tolist", on any device (a host tensor's list is recorded too)."""

    def __init__(self):
        super().__init__()
        self.seen: List[tuple] = []

    def __enter__(self):
        tolist = torch.Tensor.tolist
        self._replaced = torch.Tensor.__dict__.get("tolist")  # None: the one torch's tensor class inherits

        def recorded_tolist(tensor):
            self._record("tolist")
            return tolist(tensor)

        torch.Tensor.tolist = recorded_tolist
        return super().__enter__()

    def __exit__(self, *exc_info):
        if self._replaced is None:
            del torch.Tensor.tolist
        else:  # an enclosing counter's
            torch.Tensor.tolist = self._replaced
        return super().__exit__(*exc_info)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name.split("::")[-1]
        if (name in SYNCING_OPERATORS
                or (name == "repeat_interleave" and kwargs.get("output_size") is None)
                or (name in INDEXING_OPERATORS and any(isinstance(t, torch.Tensor) and t.dtype == torch.bool
                                                       for t in tree_leaves(args[1:2])))):
            self._record(name)
        return func(*args, **kwargs)

    def _record(self, name: str) -> None:
        frames = [f for f in traceback.extract_stack()
                  if "/torch/" not in f.filename and not f.filename.endswith("profiling.py")]
        place = "?"
        if frames:
            path = frames[-1].filename.replace("\\", "/")
            # (fairseq/: installed into a folder of its own, as the GPU kit installs it)
            for root in ("site-packages/", "pagesum_plugin/", "fairseq/", "benchmarks/"):
                if root in path:
                    path = (root if root != "site-packages/" else "") + path.split(root)[-1]
                    break
            place = f"{path}:{frames[-1].lineno}"
        self.seen.append((name, place))


class CountedGraphs:
    """A torch.compile backend: ``backend``, counting the calls of each graph it compiles.
    torch.compile may compile a graph and discard it, so ``calls`` (graph index: calls) holds
    the graphs in use, and ``len(calls)`` counts them."""

    def __init__(self, backend: Union[str, Callable] = "aot_eager"):
        self.backend = lookup_backend(backend) if isinstance(backend, str) else backend
        self.compiled = 0
        self.calls = Counter()

    def __call__(self, graph: torch.fx.GraphModule, example_inputs):
        index, self.compiled = self.compiled, self.compiled + 1
        compiled = self.backend(graph, example_inputs)

        def run(*args):
            self.calls[index] += 1
            return compiled(*args)

        return run


def count_calls(module: torch.nn.Module) -> Counter:
    """From now on, ``counter["forward"]`` counts the calls of ``module.forward``, also those that
    bypass ``module.__call__`` (fairseq's ensemble calls its decoders' ``forward`` directly)."""
    calls, forward = Counter(), module.forward

    def counted(*args, **kwargs):
        calls["forward"] += 1
        return forward(*args, **kwargs)

    module.forward = counted
    return calls
