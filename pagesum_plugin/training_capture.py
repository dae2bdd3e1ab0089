"""A training pass captured as CUDA graphs (``--capture-training``): the forward pass and the loss
of one batch shape captured once as a graph, its backward as another, both replayed for every
later batch of that shape.

Why. At batch 1 an update of ``bart.large`` is bound by the host: it launches the pass's
operators one by one, more slowly than the GPU runs them (docs/benchmarks/gpu.md). Compiling
the layers fused their kernels but left a launch per kernel and a Python call per layer. A
replay launches the whole pass at once.

What is captured. ``torch.cuda.make_graphed_callables`` captures a module whose forward takes
tensors only: ``LossOfShape`` holds the model and the criterion, and computes the criterion's
loss and the logging output's tensors (``PagedLabelSmoothedCrossEntropy.losses``) from the
batch's tensors. A captured pass may not read anything back from the device, nor change its
shapes by what it reads: the one read-back of the encoder's pass is replaced by what holds for
every batch of the shape (``static_host_facts``): PageSum encodes and decodes every page slot, a
padding page as an empty page that the page softmax (or global decoding's memory) leaves out,
and keeps every column; the flat encoders pass the padding mask to every layer; HED lays out
every document slot whole (``EverySlotLayout``). The result is the packed pass's, to rounding.
AWESOME captures each segment's pass, the memories passed between them as tensors
(``systems/awesome/captured_segments.py``). The logging output's counts are the host's
(``counts``). The update (the optimizer's step, the gradients' scaling and norm) stays eager:
the plugin's fused optimizers launch a few operators for all the weights.

What a shape keeps. Every graph a ``CapturedTraining`` captures shares one memory pool: the
passes' activations, and the static buffers of their outputs and gradients (their inputs' are
made outside it). Sharing is safe because nothing one graph leaves is read after another graph
replays: a step replays a pass's forward graph and its backward graph one after the other; the
outputs that the next pass reads (AWESOME's memories) are copied into that graph's own inputs
before it replays; the loss and the logging output are copied at once; and the gradients a
replay hands autograd are summed, set aside (``kept_gradients``) or used by the update before
another replay. So the pool holds the largest pass's activations once, not once a shape (or a
segment's place), beside every kept graph's static buffers. ``CapturedTraining`` keeps the last
``KEPT_SHAPES``; a batch of a new shape is captured (three warm-up passes, then the capture),
replacing the oldest. Batches of one shape capture once: with ``--capture-training`` the task
pads its training batches to the split's most pages, longest page and longest summary, so that
batches of one ``--batch-size`` have one shape.
Batches whose shapes kept changing would capture at every update, so a shape past the kept ones
is said in the log.

Gradients. A replayed backward hands autograd the static buffers it wrote, and autograd may
keep such a buffer as a parameter's ``.grad`` rather than copy it; the next replay writes over
it. So a micro-batch after the first (``--update-freq``) sets the gradients accumulated so far
aside, lets the replay give its own, and adds them back (``kept_gradients``).

Where a pass cannot be captured, the batch trains eager, and the log says why in one line
(``refusal``). On CUDA, ``tests/test_cuda.py`` checks captured updates against eager ones; on the
CPU, ``tests/test_training_capture.py`` checks that the pass of a shape reads nothing back and
gives the criterion's loss and gradients, and the bookkeeping through a stand-in for the graphs
(``benchmarks/graph_standin.py``).
"""

import contextlib
import logging
import time
from collections import OrderedDict
from typing import Callable, Dict, Hashable, Iterator, List, Optional, Set, Tuple

import torch
from fairseq.optim.amp_optimizer import AMPOptimizer
from torch import Tensor, nn

logger = logging.getLogger(__name__)

KEPT_SHAPES = 2  # captured shapes kept at once, all in one memory pool
WARMUP_PASSES = 3  # torch's default: lazy set-ups (cuBLAS handles, compiled graphs) run before the capture


class LossOfShape(nn.Module):
    """``criterion.losses(model, sample)`` as a module of tensors in, tensors out, for a batch
    of one shape: the net input's tensors and the target in, in ``names`` order; its other
    entries and the encoder's ``host_facts`` (``static_host_facts``) fixed."""

    def __init__(self, model: nn.Module, criterion, sample: Dict, host_facts: Hashable):
        super().__init__()
        self.model = model  # its parameters are the capture's
        self.losses = criterion.losses  # the criterion has no parameters of its own
        self.names, self.fixed = split_net_input(sample["net_input"])
        self.host_facts = host_facts

    def forward(self, *tensors: Tensor) -> Tuple[Tensor, Dict[str, Tensor]]:
        net_input = {**self.fixed, **dict(zip(self.names, tensors)), "host_facts": self.host_facts}
        return self.losses(self.model, {"net_input": net_input, "target": tensors[-1]})


def split_net_input(net_input: Dict) -> Tuple[List[str], Dict]:
    """(the names of the tensors, in a fixed order; the other entries)."""
    names = sorted(name for name, value in net_input.items() if isinstance(value, Tensor))
    return names, {name: value for name, value in net_input.items() if name not in names}


def batch_tensors(sample: Dict) -> List[Tensor]:
    """The tensors a ``LossOfShape`` takes, in its order: the net input's, then the target."""
    names, _ = split_net_input(sample["net_input"])
    return [sample["net_input"][name] for name in names] + [sample["target"]]


def refusal(model: nn.Module, criterion, sample: Dict, device: str = "cuda", optimizer=None) -> Optional[str]:
    """Why this batch cannot train captured on ``device`` (the type of the devices whose graphs
    the capture makes) through ``optimizer`` (fairseq's wrapper), or None."""
    return model_refusal(model, criterion) or batch_refusal(sample, device) or optimizer_refusal(optimizer)


def model_refusal(model: nn.Module, criterion) -> Optional[str]:
    """Why no batch of ``model`` and ``criterion`` can train captured, or None: the same at every
    update."""
    if not hasattr(criterion, "losses"):
        return f"the criterion {type(criterion).__name__} does not give its loss apart from its counts"
    capture_refusal = getattr(model, "training_capture_refusal", None)
    if capture_refusal is None:
        return f"{type(model).__name__} is not one of the plugin's models"
    reason = capture_refusal()
    if reason is not None:
        return reason
    if any(hasattr(module, "precheckpoint_forward") for module in model.modules()):
        return ("activation checkpointing (--checkpoint-activations) saves the RNG state in the pass, which a "
                "capture cannot")
    return None


def batch_refusal(sample: Dict, device: str) -> Optional[str]:
    """Why this batch cannot train captured on ``device``, whatever the model, or None."""
    if sample["target"].device.type != device:
        return f"the batch is not on {device.upper()}"
    if torch.is_autocast_enabled("cuda"):
        return "an autocast caches its casts across calls, which a capture cannot"
    try:
        hash(tuple(split_net_input(sample["net_input"])[1].items()))
    except TypeError:
        return "the net input holds entries that are neither tensors nor fixed values"
    return None


def optimizer_refusal(optimizer) -> Optional[str]:
    """Why no batch can train captured through ``optimizer``, fairseq's wrapper, or None."""
    if isinstance(optimizer, AMPOptimizer):
        return "--amp runs the pass under an autocast, which caches its casts across calls, which a capture cannot"
    return None


def shape_key(sample: Dict) -> Hashable:
    """What makes two batches the same captured pass: their tensors' names, shapes and types,
    and the net input's other entries."""
    names, fixed = split_net_input(sample["net_input"])
    tensors = [(name, tuple(t.shape), t.dtype, t.device) for name, t in zip(names + ["target"], batch_tensors(sample))]
    return tuple(tensors), tuple(sorted(fixed.items()))


def graphed(module: nn.Module, tensors: Tuple[Tensor, ...], pool) -> Callable:
    """``module`` captured by ``torch.cuda.make_graphed_callables``: a forward graph and a
    backward graph, in ``pool`` (``torch.cuda.graph_pool_handle``), shared with the other graphs
    captured there. Parameters that take no part in the pass keep no gradient, as in eager."""
    return torch.cuda.make_graphed_callables(module, tensors, num_warmup_iters=WARMUP_PASSES, allow_unused_input=True,
                                             pool=pool)


@contextlib.contextmanager
def kept_gradients(parameters: List[nn.Parameter]) -> Iterator[None]:
    """The gradients accumulated before (earlier micro-batches of an update) set aside while a
    replayed backward writes its own, then added to them."""
    held = [p for p in parameters if p.grad is not None]
    if not held:
        yield
        return
    kept = torch._foreach_mul([p.grad for p in held], 1.0)  # copies, in one operator: the replay may write over them
    for p in held:
        p.grad = None
    yield
    added = [(p, grad) for p, grad in zip(held, kept) if p.grad is not None]
    if added:  # in one operator
        torch._foreach_add_([p.grad for p, _ in added], [grad for _, grad in added])
    for p, grad in zip(held, kept):
        if p.grad is None:
            p.grad = grad


class CapturedTraining:
    """fairseq's training step (``FairseqTask.train_step``) with the pass of each batch shape
    replayed from CUDA graphs: the last ``kept`` shapes' graphs are kept, all in one memory pool
    (``new_pool()``, made at the first capture). ``capture(module, tensors, pool)`` captures a
    ``LossOfShape`` on ``device`` (``graphed``, CUDA; a test gives a stand-in on the CPU)."""

    def __init__(self, criterion, kept: int = KEPT_SHAPES, capture: Callable = graphed, device: str = "cuda",
                 new_pool: Callable[[], object] = torch.cuda.graph_pool_handle):
        self.criterion = criterion
        self.device = device
        self.kept = kept
        self.capture = capture
        self.new_pool = new_pool
        self.pool: Optional[object] = None  # the memory pool of every graph captured here
        self.shapes: "OrderedDict[Hashable, Callable]" = OrderedDict()  # the oldest first
        self.said: Set[str] = set()  # each line once
        self.model_refused: Optional[Tuple[nn.Module, Optional[str]]] = None  # (model, its refusal): asked once

    def train_step(self, model: nn.Module, sample: Dict, optimizer, ignore_grad: bool = False):
        """(loss, sample size, logging output), the gradients accumulated through ``optimizer``
        as fairseq's step does; eager where ``refusal`` says why."""
        if self.model_refused is None or self.model_refused[0] is not model:  # not every module at every update
            self.model_refused = (model, model_refusal(model, self.criterion))
        reason = self.model_refused[1] or batch_refusal(sample, self.device) or optimizer_refusal(optimizer)
        if reason is not None:
            self.say(f"--capture-training: this batch trains eager: {reason}")
            return self.eager_step(model, sample, optimizer, ignore_grad)
        return self.captured_step(model, sample, optimizer, ignore_grad)

    def eager_step(self, model: nn.Module, sample: Dict, optimizer, ignore_grad: bool):
        """fairseq's step (``FairseqTask.train_step``): the pass under --amp's autocast, then backward."""
        with torch.autocast("cuda") if isinstance(optimizer, AMPOptimizer) else contextlib.nullcontext():
            loss, sample_size, logging_output = self.criterion(model, sample)
        return self.backward(loss, optimizer, ignore_grad), sample_size, logging_output

    def captured_step(self, model: nn.Module, sample: Dict, optimizer, ignore_grad: bool):
        with kept_gradients([p for p in model.parameters() if p.requires_grad]):
            loss, sample_size, logging_output = self.captured_losses(model, sample)
            return self.backward(loss, optimizer, ignore_grad), sample_size, logging_output

    @staticmethod
    def backward(loss: Tensor, optimizer, ignore_grad: bool) -> Tensor:
        if ignore_grad:
            loss = loss * 0  # not in place: a replayed loss is the output of a graph's autograd node
        optimizer.backward(loss)
        return loss

    def captured_losses(self, model: nn.Module, sample: Dict):
        """``criterion(model, sample)``, its pass replayed from the graphs of the batch's shape."""
        key = shape_key(sample)
        tensors = batch_tensors(sample)
        host_facts = model.encoder.static_host_facts(sample["net_input"]["src_tokens"])
        graphs = self.graphs(key, lambda: LossOfShape(model, self.criterion, sample, host_facts), tensors,
                             f"the pass of a batch of shape {describe(key)}")
        loss, measured = graphs(*tensors)
        sample_size, counted = self.criterion.counts(sample)
        return loss, sample_size, {**counted, **logged(measured)}

    def graphs(self, key: Hashable, module: Callable[[], nn.Module], tensors: List[Tensor], what: str) -> Callable:
        """The graphs of ``key``: kept, or ``module()`` captured with copies of ``tensors`` as its
        static inputs (``what`` names it in the log)."""
        graphs = self.shapes.pop(key, None)
        if graphs is None:
            if len(self.shapes) >= self.kept:
                self.shapes.popitem(last=False)  # its graphs go with it; their memory stays in the pool
                self.say(f"--capture-training: batches of more than {self.kept} shapes; each new one is captured "
                         "again (three warm-up passes and the capture): give every batch one shape")
            if self.pool is None:
                self.pool = self.new_pool()
            started = time.perf_counter()
            graphs = self.capture(module(), tuple(t.clone() for t in tensors), self.pool)
            logger.info(f"--capture-training: captured {what} in {time.perf_counter() - started:.1f} s")
        self.shapes[key] = graphs  # the newest last
        return graphs

    def say(self, line: str) -> None:
        if line not in self.said:
            self.said.add(line)
            logger.warning(line)


def logged(measured: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """The logging output's own copies of a replay's tensors, out of autograd's graph: the graph's
    outputs are written over by its next replay, and the graphed node makes every output one that
    requires a gradient."""
    return {name: value.detach().clone() for name, value in measured.items()}


def describe(key: Hashable) -> str:
    """A shape key in one line: each tensor's name and shape."""
    tensors, _ = key
    return ", ".join(f"{name} {tuple(shape)}" for name, shape, _, _ in tensors)
