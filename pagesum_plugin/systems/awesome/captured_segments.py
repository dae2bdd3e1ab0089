"""AWESOME's training step with its segments' passes captured as CUDA graphs
(``--capture-training``; ``training_capture.py`` says why a pass is captured, and how).

A training step runs a batch's segments in order (``SegmentedSummarizationTask.segment_steps``):
each segment's forward pass, loss and backward, the memories carried to the next segment. A
captured pass may neither read the device nor change its shapes with what it reads, so here:

* every document's row runs every segment of the batch. A segment that a document lacks is an
  empty one, ``</s>`` then padding, whose target is all padding: it adds nothing to the loss or
  to any gradient (in the eager step the row leaves the batch). Its first token leaves every
  attention row a key, so that its states stay finite on every kernel;
* the task pads every segment to the split's longest segment input and target;
* the memories are the graphs' inputs and outputs. Every segment after the first takes, for each
  memory layer (encoder layers, then decoder layers), the states the previous segment wrote, with
  their padding taken from that segment's tokens; from the third segment on, it also takes the
  slots the previous segment read, detached. It gives the states it wrote and the slots it read.
  The first segment reads the learned initial memory M^0, and the second replays the first write
  from it, both inside their graphs, so that their losses train M^0 as in the eager step
  (``memory.py``).

So a batch shape has three passes (``PASSES``): the first segment, the second, and every later
one. Each is captured once and replayed. A window of one write, the default, is what keeps a
later segment's pass to one structure and shape (``AwesomeModel.training_capture_refusal``);
either memory is captured, the compressive one's slots carrying their empty flags beside their
values, since its rows fill at different rates. The loss, the logging output and the gradients are
the eager step's, to rounding: ``tests/test_awesome_capture.py`` on the CPU, through a stand-in
for the graphs, and ``tests/test_cuda.py`` on CUDA.
"""

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from ...modules.page_mixing import real_pages
from ...training_capture import KEPT_SHAPES, CapturedTraining, logged
from .memory import MemorySlots, PendingWrite, SegmentMemory, SegmentStates

PASSES = ("the first segment", "the second segment", "a later segment")


class SegmentPass(nn.Module):
    """One segment's ``criterion.losses``, the memories given and taken as tensors.

    In: the segment's source (rows, seg_len), summary input and target (rows, tgt_len); then, for
    every segment but the first, the previous segment's source and summary input, the states each
    memory layer wrote, (rows, len, dim), and, from the third segment on, the slots each read,
    (rows, m, dim), then, for the compressive memory, which fills up, their empty flags (rows, m).
    Out: the loss, the logging output's tensors, the states this segment wrote and, after the
    first segment, the slots it read and their empty flags, as it takes them (all detached)."""

    def __init__(self, model: nn.Module, criterion, position: int, host_facts: Tuple[bool]):
        super().__init__()
        self.model = model  # its parameters are the capture's
        self.losses = criterion.losses  # the criterion has no parameters of its own
        self.position = position  # an index into PASSES
        self.host_facts = host_facts
        self.encoder_layers = len(model.encoder.memories)
        self.layers = self.encoder_layers + len(model.decoder.memories)  # memory layers, encoder then decoder
        # the compressive memory fills up: its slots' empty flags travel beside their values
        self.filling = any(m.kind == "compressive" for m in model.encoder.memories + model.decoder.memories)
        self.pad = model.decoder.padding_idx

    def forward(self, src_tokens: Tensor, prev_output_tokens: Tensor, target: Tensor, *carried: Tensor):
        memory = self.memory(carried)
        net_input = {"src_tokens": src_tokens, "src_lengths": None, "prev_output_tokens": prev_output_tokens,
                     "memory": memory, "host_facts": self.host_facts}
        loss, measured = self.losses(self.model, {"net_input": net_input, "target": target})
        pending = memory.encoder + memory.decoder  # what the pass left for the next segment
        written = tuple(write.writes[-1].states for write in pending)
        read = tuple(write.slots.values for write in pending) if self.position > 0 else ()
        if self.filling and self.position > 0:
            read += tuple(write.slots.empty for write in pending)
        return loss, measured, written, read

    def memory(self, carried: Sequence[Tensor]) -> SegmentMemory:
        """The memory as the eager step leaves it after the previous segment."""
        memory = SegmentMemory()
        if self.position == 0:
            return memory
        previous_source, previous_summary, *tensors = carried
        states, values = tensors[:self.layers], tensors[self.layers:2 * self.layers] or [None] * self.layers
        empty = tensors[2 * self.layers:] or [None] * self.layers  # (rows, m) each, for a filling memory
        paddings = [previous_source.eq(self.pad)] * self.encoder_layers + \
                   [previous_summary.eq(self.pad)] * (self.layers - self.encoder_layers)  # each (rows, len)
        slots = [None if v is None else MemorySlots.full(v) if e is None else MemorySlots(v, e)
                 for v, e in zip(values, empty)]
        pending = [PendingWrite(read, [SegmentStates(h, padding)]) for h, padding, read in zip(states, paddings, slots)]
        memory.encoder, memory.decoder = pending[:self.encoder_layers], pending[self.encoder_layers:]
        return memory


class SummedGradients:
    """The gradients of a step's replays, summed in tensors of the step's own: one foreach add
    a replay, where autograd would add each weight's gradient with an operator of its own.

    Before each backward every weight's gradient is None, so autograd hands the weight the
    replay's gradient (a view of the graph's buffer, which the next replay of that graph writes
    over) rather than adding it. ``add_replayed`` adds it to the sums, a copy where a weight has
    no sum yet, and takes it off the weight; ``give_back`` makes the sums the gradients. The
    gradients the step starts with (earlier micro-batches') are the first sums: the step's or
    eager's own tensors, never a graph's buffer."""

    def __init__(self, weights: List[nn.Parameter]):
        self.weights = weights
        self.sums: List[Optional[Tensor]] = [p.grad for p in weights]
        for p in weights:
            p.grad = None

    def add_replayed(self) -> None:
        given = [(i, p.grad) for i, p in enumerate(self.weights) if p.grad is not None]
        added = [(i, grad) for i, grad in given if self.sums[i] is not None]
        first = [(i, grad) for i, grad in given if self.sums[i] is None]
        if added:
            torch._foreach_add_([self.sums[i] for i, _ in added], [grad for _, grad in added])
        if first:  # copies, in one operator
            for (i, _), copy in zip(first, torch._foreach_mul([grad for _, grad in first], 1.0)):
                self.sums[i] = copy
        for p in self.weights:
            p.grad = None

    def give_back(self) -> None:
        for p, grad in zip(self.weights, self.sums):
            p.grad = grad


def every_row_segments(sample: Dict, exists: Tensor, eos: int) -> Tuple[Tensor, Tensor, Tensor]:
    """(sources, summary inputs, targets), each (batch, max_segments, len): the batch's segments
    with every row in every one, a segment a document lacks (``exists``: (batch, max_segments)
    bool) starting with ``</s>``."""
    lacking = ~exists
    sources = sample["net_input"]["src_tokens"].clone()  # (batch, max_segments, seg_len)
    summaries = sample["segment_prev_output_tokens"].clone()
    sources[:, :, 0].masked_fill_(lacking, eos)
    summaries[:, :, 0].masked_fill_(lacking, eos)
    return sources, summaries, sample["segment_target"]


class CapturedSegments(CapturedTraining):
    """``CapturedTraining`` for AWESOME: each segment's pass replayed from the graphs of its
    place (``PASSES``) and the batch's shape; where a batch cannot be captured, the task's own
    step, ``eager(sample, model, criterion, optimizer, ignore_grad)``."""

    def __init__(self, criterion, eager: Callable, **options):
        super().__init__(criterion, kept=len(PASSES) * KEPT_SHAPES, **options)
        self.eager = eager

    def eager_step(self, model: nn.Module, sample: Dict, optimizer, ignore_grad: bool):
        return self.eager(sample, model, self.criterion, optimizer, ignore_grad)

    def captured_step(self, model: nn.Module, sample: Dict, optimizer, ignore_grad: bool):
        dictionary = self.criterion.task.target_dictionary
        exists = real_pages(sample["net_input"]["src_tokens"], dictionary.pad())  # (batch, max_segments)
        sources, summaries, targets = every_row_segments(sample, exists, dictionary.eos())
        # what the host knows of each segment, read back once: the documents that have it and its target tokens
        documents, tokens = torch.stack([exists.sum(0), targets.ne(dictionary.pad()).sum(dim=(0, 2))]).tolist()
        host_facts = model.encoder.static_host_facts(sources[:, 0])
        total, logs, carried = None, [], []
        summed = SummedGradients([p for p in model.parameters() if p.requires_grad])
        for t in range(sources.size(1)):
            tensors = [sources[:, t], summaries[:, t], targets[:, t], *carried]  # (batch, len) each, then the memory
            position = min(t, len(PASSES) - 1)
            key = (position, tuple((tuple(x.shape), x.dtype, x.device) for x in tensors))
            graphs = self.graphs(key, lambda: SegmentPass(model, self.criterion, position, host_facts), tensors,
                                 f"{PASSES[position]} of a batch of shape {describe_segment(tensors)}")
            loss, measured, written, read = graphs(*tensors)
            loss = self.backward(loss, optimizer, ignore_grad).detach()
            summed.add_replayed()
            # out of autograd's graph: a replay's outputs must not link the next segment's node to this one
            carried = [sources[:, t], summaries[:, t], *(x.detach() for x in written + read)]
            total = loss.clone() if total is None else total + loss  # a copy: the replay's next call writes over it
            _, counted = self.criterion.counts({"ntokens": tokens[t]}, sentences=documents[t])
            logs.append({**counted, **logged(measured)})
        summed.give_back()
        merged = batch_logging_output(logs, sample)
        return total, merged["sample_size"], merged


def batch_logging_output(logs: List[Dict], sample: Dict) -> Dict:
    """One logging output for the batch: its segments' outputs summed, counted in documents."""
    merged: Dict = {}
    for log in logs:
        for key, value in log.items():
            merged[key] = merged.get(key, 0) + value
    merged["nsegments"] = merged.get("nsentences", 0)
    merged["nsentences"] = merged["ndocuments"] = sample["nsentences"]
    return merged


def describe_segment(tensors: List[Tensor]) -> str:
    """A segment's tensors in one line: the source's and the summary's shapes."""
    return f"source {tuple(tensors[0].shape)}, summary {tuple(tensors[1].shape)}"
