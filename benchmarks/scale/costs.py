"""What a row group costs: model FLOPs, bytes moved, operators launched, and the seconds they
take on a GPU by an estimate printed before the group starts.

FLOPs. A training update of PageSum (B batch, P pages of S tokens, T summary tokens, d model
width):

    FLOPs = 6 x [ (N_enc + N_kv) B P S  +  N_dec B P T  +  N_out B T
                  + 2 d B P (L_enc S^2 + L_dec (T^2 + T S)) ]

N_enc the encoder's linear weights (per source token), N_kv the cross-attention key/value
projections (per source token: each page's keys and values are projected once), N_dec the
decoder's other linear weights (per summary token and page: the decoder runs once per page),
N_out the output projection V x d (once per summary token, after the pages are mixed). 2 x
weights FLOPs per token forward, twice that backward: 6. Attention: the scores Q K^T and the
context P V, d multiply-adds each per (query, key) pair, counted in full (the causal mask is
a dense mask: the kernels compute every score). Checkpointing's recomputation is not model
FLOPs. Full-attention BART on the same tokens is the case P = 1, S = all source tokens.

Bytes one decoding step must read, in the model's dtype (B batch, beam, P pages, S page
length, t the self-attention cache's length):

    decoder weights (all but the cross-attention k/v projections and the positions)
    + cross-attention keys and values: L_dec x 2 x B x P x S x d (x beam when per beam)
    + self-attention cache: (1 + (L_dec - 1) x P) x 2 x B x beam x t x d
      (the first layer reads only the summary prefix: one row per hypothesis, not per page)

Estimate. A group's seconds are

    start-up + model building          (START_SECONDS; BUILD_SECONDS_PER_WEIGHT x weights)
    + max(host, device)                (the host launches operators while the GPU runs earlier
                                        ones: the slower of the two sets the pace)

    host   = operators x HOST_SECONDS_PER_OP   (eager PyTorch launches each operator from Python)
    device = FLOPs / (MATMUL_EFFICIENCY x the bf16 dense peak)
             + bytes moved / (BANDWIDTH_EFFICIENCY x the memory bandwidth)

with the run's GPU's peaks (``hardware``), or an H100's where they are unknown (on the CPU).
The operator counts per decoder step and per training pass were counted on the CPU with a
dispatch mode (``tests/test_scale_costs.py`` counts them again). A decoding step moves more
than it must read: the self-attention cache is copied whole at every step (read and
written), and with one copy of the pages per beam the cross-attention keys and values are
reordered with the beams (read and written). A throughput row stops at its first batch that
runs out of memory, which the memory model (``pagesum_plugin.memory``) predicts.

The constants were fitted to the first H100 visit (2026-11-26, bf16, bart.large): a fresh
process took 16 s to its first group (imports and the CUDA context), a decoding step took
15-26 ms for about 1,650 operators (10-16 us each: host-bound at every batch tried), training
ran at 10-25 % MFU, and building bart.large with its optimizer took about 10 s. Against those
groups the estimates are 0.8-1.5x the measured seconds (``tests/test_scale_costs.py``).
"""

from dataclasses import dataclass
from typing import Dict

from torch import nn

from benchmarks.common import ModelSize
from benchmarks.scale.hardware import REFERENCE_GPU, Peaks, peaks_by_name
from pagesum_plugin.architectures import SPECIAL_SYMBOLS, Architecture
from pagesum_plugin.memory.model import Step, predict

START_SECONDS = 16.0  # a fresh process: Python, torch and fairseq imports, the CUDA context
BUILD_SECONDS_PER_WEIGHT = 2.5e-8  # fairseq's random initialisation on the CPU, then to the GPU: ~10 s for bart.large
HOST_SECONDS_PER_OP = 14e-6  # one eager operator launched from Python (H100 visit: 10-16 us)
MATMUL_EFFICIENCY = 0.25  # of the bf16 dense peak, for fairseq training at these shapes (H100 visit: 10-25 % MFU)
BANDWIDTH_EFFICIENCY = 0.6  # of the memory bandwidth, for copies and attention reads
GPU_MEMORY_BYTES = 80e9  # an H100's: where a throughput row's batches stop
COMPILE_SECONDS = 60.0  # inductor compiling a decoding step (compiled_decoding: 34-40 s on an H100, its first search)
TRAINING_COMPILE_SECONDS = 70.0  # inductor compiling an encoder and a decoder layer, forward and backward (H100: 69 s)
DECODER_STEP_OPS = (96, 49)  # one beam-search step: fixed + per decoder layer (counted: 684 at 12 layers)
TRAINING_PASS_OPS = (214, 516)  # forward + backward: fixed + per encoder/decoder layer pair (6,406 at 12)
OPTIMIZER_OPS_PER_TENSOR = 15  # fairseq's bf16 wrapper and Adam, per weight tensor
TENSORS_PER_LAYER = 26  # weight tensors of a decoder layer (an encoder layer has 16)
BLOCKER_OPS = 20  # the tensor n-gram blocker, per step
CAPTURED_STEP_OPS = 10  # a captured step: the graph's replay and the read-back of the ended hypotheses


@dataclass
class Cost:
    """Work that takes time: fixed seconds, host-launched operators, FLOPs and bytes moved."""

    fixed: float = 0.0
    ops: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    steps: int = 0  # decoder steps, for the description

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.fixed + other.fixed, self.ops + other.ops, self.flops + other.flops,
                    self.bytes + other.bytes, self.steps + other.steps)

    def times(self, n: float) -> "Cost":
        return Cost(self.fixed * n, self.ops * n, self.flops * n, self.bytes * n, int(self.steps * n))

    def parts(self, peaks: Peaks) -> Dict[str, float]:
        """Seconds by kind of work, against ``peaks`` (an H100's where one is unknown); host and
        device work overlap (``seconds``)."""
        reference = peaks_by_name(REFERENCE_GPU)
        flops = peaks.flops or reference.flops
        bandwidth = peaks.bandwidth or reference.bandwidth
        return {"start-up and building": self.fixed, "host": self.ops * HOST_SECONDS_PER_OP,
                "compute": self.flops / (MATMUL_EFFICIENCY * flops),
                "memory": self.bytes / (BANDWIDTH_EFFICIENCY * bandwidth)}

    def seconds(self, peaks: Peaks) -> float:
        parts = self.parts(peaks)
        return parts["start-up and building"] + max(parts["host"], parts["compute"] + parts["memory"])

    def describe(self, peaks: Peaks) -> str:
        """The seconds and how they were reckoned, e.g. "289 s: 40 s start-up and model building, ..."."""
        parts = self.parts(peaks)
        return (f"{self.seconds(peaks):.0f} s: {parts['start-up and building']:.0f} s start-up and model building, "
                f"then the longer of {parts['host']:.0f} s host ({self.ops:,.0f} operators x "
                f"{HOST_SECONDS_PER_OP * 1e6:.0f} us) and {parts['compute']:.0f} s compute ({self.flops / 1e12:,.0f} TFLOP at {MATMUL_EFFICIENCY:.0%} of the "
                f"peak) + {parts['memory']:.0f} s memory ({self.bytes / 1e9:,.0f} GB at {BANDWIDTH_EFFICIENCY:.0%} of "
                f"the bandwidth)" + (f"; {self.steps:,} decoder steps" if self.steps else ""))


# ---- weights ------------------------------------------------------------------------------------


def padded_vocab(size: ModelSize) -> int:
    """``common.make_dictionary``'s size: the words, 4 special symbols, padded to a multiple of 8."""
    return -(-(size.vocab_words + SPECIAL_SYMBOLS) // 8) * 8


def weight_counts(size: ModelSize) -> Dict[str, int]:
    """The linear weights of PageSum of ``size`` by the tokens they multiply (``matmul_weights``'s
    kinds), from its dimensions: per layer, attention's four d x d projections (self-attention;
    cross-attention's queries and output, its keys and values under ``cross_kv``) and the
    feed-forward's two d x ffn; the decoder's page confidence (d x 1); the output projection."""
    d, f, layers = size.embed_dim, size.ffn_dim, size.layers
    return {"encoder": layers * (4 * d * d + 2 * d * f), "cross_kv": layers * 2 * d * d,
            "decoder": layers * (6 * d * d + 2 * d * f) + d, "output": padded_vocab(size) * d}  # + the page confidence


def matmul_weights(model: nn.Module) -> Dict[str, int]:
    """The model's linear weights by the tokens they multiply: ``encoder`` (source tokens),
    ``cross_kv`` (the cross-attention key/value projections: source tokens, once per page),
    ``decoder`` (summary tokens, once per page), ``output`` (summary tokens, after mixing)."""
    counts = {"encoder": 0, "cross_kv": 0, "decoder": 0, "output": 0}
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        if name.startswith("encoder."):
            counts["encoder"] += module.weight.numel()
        elif name == "decoder.output_projection":
            counts["output"] += module.weight.numel()
        elif name.endswith(("encoder_attn.k_proj", "encoder_attn.v_proj")):
            counts["cross_kv"] += module.weight.numel()
        else:
            counts["decoder"] += module.weight.numel()
    return counts


def model_weights(size: ModelSize) -> int:
    """All weights of the model, about: its linear weights (the output projection is the
    shared embedding)."""
    return sum(weight_counts(size).values())


# ---- FLOPs and bytes --------------------------------------------------------------------------


def training_flops(counts: Dict[str, int], layers: int, d: int, batch: int, pages: int, page_len: int,
                   tgt_len: int) -> float:
    """Model FLOPs of one training update (the module docstring's formula); ``layers`` per side."""
    b, p, s, t = batch, pages, page_len, tgt_len
    return 6 * ((counts["encoder"] + counts["cross_kv"]) * b * p * s + counts["decoder"] * b * p * t
                + counts["output"] * b * t + 2 * d * b * p * (layers * s * s + layers * (t * t + t * s)))


def flops_formula(counts: Dict[str, int], layers: int, d: int, pages: int, page_len: int, tgt_len: int) -> str:
    """The formula, with the model's numbers, for a table's caption."""
    millions = {name: f"{value / 1e6:.3g}M" for name, value in counts.items()}
    return ("FLOPs = 6 x [(N_enc + N_kv) B P S + N_dec B P T + N_out B T + 2 d B P (L_enc S^2 + L_dec (T^2 + T S))], "
            f"N_enc = {millions['encoder']}, N_kv = {millions['cross_kv']}, N_dec = {millions['decoder']}, "
            f"N_out = {millions['output']}, L_enc = L_dec = {layers}, d = {d}, P = {pages}, S = {page_len}, "
            f"T = {tgt_len}")


def step_bytes(weight_bytes: float, layers: int, d: int, element: int, batch: int, beam: int, pages: int,
               page_len: int, length: float, shared: bool) -> Dict[str, float]:
    """Bytes one decoding step must read, by kind, with a self-attention cache of ``length``
    positions (the module docstring's formula); ``weight_bytes``: the decoder's weights read."""
    copies = 1 if shared else beam
    return {"weights": weight_bytes, "cross k/v": layers * 2 * batch * copies * pages * page_len * d * element,
            "self cache": (1 + (layers - 1) * pages) * 2 * batch * beam * length * d * element}


def memory_architecture(size: ModelSize) -> Architecture:
    """``size`` as the memory model describes an architecture."""
    return Architecture(size.layers, size.embed_dim, size.ffn_dim, size.heads, padded_vocab(size))


def training_peak_bytes(size: ModelSize, element: int, batch: int, pages: int, page_len: int, tgt_len: int) -> float:
    """The memory model's peak of a training update of PageSum of ``size`` with fairseq's Adam,
    in 16-bit where ``element`` is 2, else fp32."""
    step = Step("pagesum", memory_architecture(size), pages, page_len, tgt_len, batch=batch,
                dtype="bf16" if element == 2 else "fp32", optimizer="adam")
    return predict(step).peak


def decoder_weight_bytes(size: ModelSize, element: int) -> float:
    """The decoder weights a step reads, from the dimensions (all but the cross-attention k/v)."""
    counts = weight_counts(size)
    return (counts["decoder"] + counts["output"]) * element


# ---- the work of a training update and of a beam search ---------------------------------------


def build(size: ModelSize, models: int = 1) -> Cost:
    return Cost(fixed=models * BUILD_SECONDS_PER_WEIGHT * model_weights(size))


def start() -> Cost:
    return Cost(fixed=START_SECONDS)


def training_pass(size: ModelSize, batch: int, pages: int, page_len: int, tgt_len: int,
                  checkpointing: bool = False, optimizer: bool = False) -> Cost:
    """One forward and backward (and the bf16 optimizer's update when ``optimizer``)."""
    recompute = 4 / 3 if checkpointing else 1.0  # the forward runs twice
    flops = training_flops(weight_counts(size), size.layers, size.embed_dim, batch, pages, page_len, tgt_len)
    ops = (TRAINING_PASS_OPS[0] + TRAINING_PASS_OPS[1] * size.layers) * recompute
    moved = 0.0
    if optimizer:  # bf16 weights and gradients, fp32 master weights, gradients and moments: read and written
        ops += OPTIMIZER_OPS_PER_TENSOR * TENSORS_PER_LAYER * 2 * size.layers
        moved = 2 * 20 * model_weights(size)
    return Cost(ops=ops, flops=flops * recompute, bytes=moved)


def beam_search(size: ModelSize, element: int, batch: int, beam: int, pages: int, page_len: int, steps: int,
                shared: bool = True, extra_ops: int = 0, captured: bool = False) -> Cost:
    """An encoder pass over the pages, then ``steps`` steps, each launching the decoder's
    operators (``captured``: one graph and the read-back of the ended hypotheses) and moving
    what it must read plus the whole-cache copies (module docstring)."""
    counts = weight_counts(size)
    d, layers, tokens = size.embed_dim, size.layers, batch * pages * page_len
    encoder = Cost(ops=TRAINING_PASS_OPS[1] * layers / 3,
                   flops=2 * (counts["encoder"] + counts["cross_kv"]) * tokens + 4 * d * layers * tokens * page_len)
    read = step_bytes(decoder_weight_bytes(size, element), layers, d, element, batch, beam, pages, page_len,
                      (steps + 1) / 2, shared)
    moved = sum(read.values()) + 2 * read["self cache"] + (0 if shared else 2 * read["cross k/v"])
    rows = batch * beam * pages
    per_step_flops = 2 * counts["decoder"] * rows + 2 * counts["output"] * batch * beam
    step_ops = CAPTURED_STEP_OPS if captured else DECODER_STEP_OPS[0] + DECODER_STEP_OPS[1] * layers + extra_ops
    return encoder + Cost(ops=steps * step_ops, flops=steps * per_step_flops, bytes=steps * moved, steps=steps)


def profiled_searches(size: ModelSize, element: int, **search) -> Cost:
    """``search.step_kernels``'s two short searches under torch's profiler, which about doubles
    what the host spends on each operator."""
    profiled = beam_search(size, element, steps=8, **search) + beam_search(size, element, steps=40, **search)
    return profiled + Cost(ops=profiled.ops)


def timed_searches(size: ModelSize, element: int, repeats: int, steps: int, **search) -> Cost:
    """A warm-up search (two tokens; a captured search: the whole length), then ``repeats``
    timed searches of ``steps`` steps."""
    warmup = steps if search.get("captured") else 2
    return (beam_search(size, element, steps=warmup, **search)
            + beam_search(size, element, steps=steps, **search).times(repeats))
