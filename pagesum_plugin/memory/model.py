"""How much memory one training step needs, predicted from the shapes alone.

    peak = weights + optimizer state (+ fp32 master weights and their gradients)
           + max(activations kept for backward + the first gradients of backward,
                 every gradient + the optimizer's scratch)

(docs/benchmarks/memory_plan.md has its error, at small vocabularies and at BART's).

Activations are counted as tensors of the model's dtype per token and layer, in four kinds:
``d``-wide tensors (layer inputs, projections, residuals, normalisations), ``ffn``-wide ones
(the feed-forward hidden layer before and after its activation), attention score matrices
(heads x queries x keys) where the kernel keeps them, and the output layer's vocabulary-wide
logits: of the whole summary, or of one chunk of ``loss_chunk_tokens`` tokens where the
plugin's criterion takes the loss a chunk at a time (``Step.loss_chunk``). How many tensors of each kind a layer keeps was measured, not derived: the counts in
``COUNTS`` are a least-squares fit of training-step peaks measured with torch's MemTracker
(``pagesum_recipes.profiling.peak_memory``) on CPU, over models and inputs of several widths,
depths and lengths (``python -m benchmarks.memory_plan --calibrate`` refits them), and
``benchmarks/memory_plan.py`` prints the model's error at sizes the fit did not see.

The attention kernel is a parameter, since the score matrices are where kernels differ:
``bmm`` (batched matmul + softmax: the (heads, queries, keys) scores are kept in fp32, plus
a copy in the model's dtype when that is 16-bit) or ``fused`` (SDPA's flash or
memory-efficient kernels: only a log-sum-exp per query and head). The encoders already run
SDPA; ``decoder_kernel`` is the decoder's self- and cross-attention.

With activation checkpointing (``--checkpoint-activations``) every layer keeps only its
input, and backward recomputes one layer at a time: the activations are the layer inputs plus
the larger of the loss's logits (at the end of forward) and the largest single layer's, with
the temporaries of its backward (a fitted multiple of it), which backward recomputes after
the loss's temporaries are gone.

The dimensions of an architecture, how each system lays an example out, and the criterion's loss
chunk are read from ``pagesum_plugin.architectures``. Pure arithmetic: no torch, so that
``pagesum-plan`` answers at once.
"""

from dataclasses import dataclass
from typing import Optional, Tuple

from ..architectures import (AWESOME_SLOTS, HEPOS_STRIDE, HEPOS_WINDOW, LOSS_CHUNK_TOKENS, MASTER_BUCKET_BYTES, SYSTEMS,
                             Architecture)

GB = 10**9
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
KERNELS = ("bmm", "fused")
OPTIMIZERS = ("adam", "adamw_torch", "adafactor", "adafactor_batched")


@dataclass(frozen=True)
class Counts:
    """Tensors kept for backward per token and layer, in units of the kind's width."""

    encoder_d: float  # per source token and encoder layer, d-wide
    encoder_ffn: float  # per source token and encoder layer, ffn-wide
    decoder_d: float  # per decoder token and decoder layer, d-wide
    decoder_ffn: float  # per decoder token and decoder layer, ffn-wide
    cross_kv: float  # per source token that a decoder row reads, per decoder layer, d-wide (keys, values)
    logits: float  # per summary token of the batch, or of a loss chunk, vocabulary-wide (logits, fp32
    #                log-probabilities, their gradient)
    checkpointed_d: float  # per token and layer with checkpointing, d-wide (the layer's input)
    recomputed_layer: float  # with checkpointing, the largest layer's activations while backward recomputes it
    #                          and holds its gradients' temporaries, in units of that layer's activations


# Least-squares fit to MemTracker peaks on CPU (benchmarks/memory_plan.py --calibrate); the
# ffn-wide counts are counted: the feed-forward keeps its hidden layer once, before the
# activation, which backward computes again (``modules/feed_forward.py``). The d-wide counts are
# those of layers that keep no layer norm's output (``modules/layer_norm.py``) and bool dropout
# masks (``modules/dropout.py``).
COUNTS = Counts(encoder_d=9.54, encoder_ffn=1.0, decoder_d=8.09, decoder_ffn=1.0, cross_kv=2.0, logits=2.35,
                checkpointed_d=1.0, recomputed_layer=2.21)


@dataclass(frozen=True)
class Step:
    """One training step's shapes and settings."""

    system: str  # a key of SYSTEMS
    arch: Architecture
    pages: int  # pages (PageSum), documents (HED), segments (AWESOME); 1 for a flat sequence
    page_tokens: int  # tokens per page (PageSum, HED, AWESOME's segment) or of the whole input (BART, HEPOS)
    summary_tokens: int
    batch: int = 1
    dtype: str = "fp32"  # fp32, or bf16 / fp16 (fairseq's wrapper: fp32 master weights)
    checkpointing: bool = False
    optimizer: str = "adamw_torch"
    master_weights: bool = True  # 16-bit: fairseq's wrapper keeps fp32 master weights and gradients; False: its
    #                              memory-efficient wrapper (--memory-efficient-bf16/fp16) updates the 16-bit ones,
    #                              and adamw_torch then keeps fp32 master weights itself (no fp32 gradients)
    decoder_kernel: str = "fused"  # fused (SDPA, what the layers run) or bmm (the attention of before)
    encoder_kernel: str = "fused"  # the encoders' SDPA
    hepos_window: int = HEPOS_WINDOW  # HEPOS's encoder window (its sparse layers read about as many keys)
    hepos_stride: int = HEPOS_STRIDE  # HEPOS's cross-attention: each head reads every stride-th source token
    memory_slots: int = AWESOME_SLOTS["bart_large"]  # AWESOME's memory slots (m)
    loss_chunk_tokens: Optional[int] = None  # summary tokens whose logits exist at once (0: all of them);
    #                                          None: what the system's recipes train with (``loss_chunk``)

    @property
    def input_tokens(self) -> int:
        return self.pages * self.page_tokens

    @property
    def loss_chunk(self) -> int:
        """Summary tokens whose logits the loss computes at once, 0 for all of them: the plugin's
        criterion (``LOSS_CHUNK_TOKENS``) for the systems it trains (``SystemShape.chunked_loss``),
        fairseq's (all) otherwise. In fp16 the plugin's criterion takes the whole logits too: its
        chunks' gradients, taken before the loss scale is known, would underflow
        (``chunked_loss.fp16_logits``)."""
        chunk = self.loss_chunk_tokens
        if chunk is None:
            chunk = LOSS_CHUNK_TOKENS if SYSTEMS[self.system].chunked_loss else 0
        return 0 if self.dtype == "fp16" else chunk

    def check(self) -> "Step":
        if self.system not in SYSTEMS:
            raise ValueError(f"system {self.system!r}: not one of {', '.join(SYSTEMS)}")
        for name, value, allowed in (("dtype", self.dtype, DTYPE_BYTES), ("optimizer", self.optimizer, OPTIMIZERS),
                                     ("decoder_kernel", self.decoder_kernel, KERNELS),
                                     ("encoder_kernel", self.encoder_kernel, KERNELS)):
            if value not in allowed:
                raise ValueError(f"{name} {value!r}: not one of {', '.join(allowed)}")
        if min(self.pages, self.page_tokens, self.summary_tokens, self.batch) < 1:
            raise ValueError(f"pages, tokens, summary tokens and batch must be at least 1: {self}")
        if self.loss_chunk < 0:
            raise ValueError(f"loss_chunk_tokens {self.loss_chunk_tokens}: must be 0 (no chunks) or more")
        return self


def parameters(step: Step) -> int:
    """The model's parameter count (fairseq's BART: tied input and output embeddings, learned
    positions of 1,024 + 2 entries per side, or the input's length for a flat input beyond it)."""
    a, shape = step.arch, SYSTEMS[step.system]
    d, f = a.embed_dim, a.ffn_dim
    positions = max(a.positions, step.page_tokens if shape.flat else 0) + 2
    attention = 4 * d * d + 4 * d
    ffn = 2 * d * f + f + d
    encoder = a.layers * (attention + ffn + 4 * d)
    decoder = a.layers * (2 * attention + ffn + 6 * d)
    extra = (d + 1 if shape.page_decoders else 0) + (memory_parameters(step) if shape.memory else 0)
    return a.vocab * d + 2 * (positions * d + 2 * d) + encoder + decoder + extra


def memory_parameters(step: Step) -> int:
    """AWESOME's attentive memory in its last 3 layers: the initial slots and a write
    attention per layer, and its gate."""
    d = step.arch.embed_dim
    return 3 * (step.memory_slots * d + 4 * d * d + 4 * d + 2 * d * d + d)


@dataclass(frozen=True)
class Prediction:
    weights: float  # bytes: weights, fp32 master copies and their gradients, optimizer state
    activations: float  # bytes kept for backward at the start of backward
    gradients: float  # bytes of the model's gradients
    peak: float  # bytes

    @property
    def peak_gb(self) -> float:
        return self.peak / GB


def static_bytes(step: Step) -> Tuple[float, float]:
    """(weights + masters + optimizer state, the model's gradients), in bytes."""
    n = parameters(step)
    size = DTYPE_BYTES[step.dtype]
    # fp32 moments; Adafactor: factored
    state = {"adam": 8, "adamw_torch": 8, "adafactor": 0.01, "adafactor_batched": 0.01}[step.optimizer] * n
    masters = 0
    if size < 4 and step.master_weights:  # fairseq's wrapper: an fp32 copy and its fp32 gradient
        masters = 8 * n
    elif size < 4 and step.optimizer == "adamw_torch":  # the optimizer's own fp32 copy
        masters = 4 * n
    return size * n + state + masters, size * n


def attention_sequences(step: Step) -> Tuple[int, int, int, int]:
    """(encoder rows, tokens per encoder row, keys per encoder query, decoder rows): how the
    system lays out one example (``SystemShape``). A row is a page (HED: a document, whose start
    tokens add a handful of keys), the flat input, or AWESOME's one segment in the graph at a time
    (K = 1 earlier write replayed)."""
    shape = SYSTEMS[step.system]
    keys = step.page_tokens
    if shape.encoder_window:
        keys = min(keys, 2 * step.hepos_window)
    if shape.memory:
        keys += step.memory_slots
    return (step.pages if shape.page_rows else 1), step.page_tokens, keys, (step.pages if shape.page_decoders else 1)


def activation_bytes(step: Step, counts: Counts = COUNTS) -> float:
    """What the forward pass keeps for backward, in bytes."""
    a, size, shape = step.arch, DTYPE_BYTES[step.dtype], SYSTEMS[step.system]
    d, f, h = a.embed_dim, a.ffn_dim, a.heads
    rows, tokens, keys, decoder_rows = attention_sequences(step)
    rows, decoder_rows = rows * step.batch, decoder_rows * step.batch
    source = rows * tokens  # encoder tokens in the batch
    target = decoder_rows * step.summary_tokens  # decoder tokens (PageSum: one decoder per page)
    cross_keys = step.input_tokens if shape.cross_input else tokens  # source tokens a decoder row reads
    if shape.cross_stride:
        cross_keys = -(-cross_keys // step.hepos_stride)
    score_bytes = 4 + (size if size < 4 else 0)  # fp32 scores, and their 16-bit copy
    encoder_scores = source * h * keys * score_bytes if step.encoder_kernel == "bmm" else 0
    decoder_scores = (target * h * (step.summary_tokens + cross_keys) * score_bytes
                      if step.decoder_kernel == "bmm" else 0)
    encoder_layer = size * source * (counts.encoder_d * d + counts.encoder_ffn * f) + encoder_scores
    decoder_layer = (size * target * (counts.decoder_d * d + counts.decoder_ffn * f)
                     + size * decoder_rows * cross_keys * counts.cross_kv * d + decoder_scores)
    logit_rows = step.batch * step.summary_tokens  # the whole batch's logits, or one chunk's
    logit_rows = min(logit_rows, step.loss_chunk) if step.loss_chunk else logit_rows
    logits = logit_rows * a.vocab * counts.logits * 4  # fp32 log-probabilities
    if step.checkpointing:
        kept = size * (source + target) * counts.checkpointed_d * d * a.layers
        return kept + max(counts.recomputed_layer * max(encoder_layer, decoder_layer), logits)
    return a.layers * (encoder_layer + decoder_layer) + logits


def predict(step: Step, counts: Counts = COUNTS) -> Prediction:
    """The peak memory of one training step of ``step`` (from the second step on: the
    optimizer's state exists)."""
    step.check()
    static, gradients = static_bytes(step)
    activations = activation_bytes(step, counts)
    first_gradients = backward_gradients(step)
    peak = static + max(activations + first_gradients, gradients + optimizer_scratch(step))
    return Prediction(weights=static, activations=activations, gradients=gradients, peak=peak)


def backward_gradients(step: Step) -> float:
    """The gradients backward has made by the time it reaches the encoder, whose activations
    are freed last: the output layer's (the embedding) and the decoder's, in the model's dtype."""
    a = step.arch
    d, f = a.embed_dim, a.ffn_dim
    decoder = a.layers * (8 * d * d + 2 * d * f)
    return (a.vocab * d + decoder) * DTYPE_BYTES[step.dtype]


def optimizer_scratch(step: Step) -> float:
    """What the optimizer's update allocates at once, in bytes."""
    cast = DTYPE_BYTES[step.dtype] / 4 if DTYPE_BYTES[step.dtype] < 4 and not step.master_weights else 0
    if step.optimizer == "adamw_torch" and cast:  # a bucket of fp32 gradients, and its 16-bit copy while cast
        return update_bucket_bytes(step) * (1 + cast)
    if step.optimizer == "adafactor_batched":  # a bucket's fp32 update and weights, and 16-bit weights' stack
        return update_bucket_bytes(step) * (2 + cast)
    # fairseq's loops, a weight at a time: adam's sqrt(v) + eps; adafactor's grad**2 and the same plus eps,
    # then the old update and the new one; both on fp32 copies of a 16-bit weight and its gradient
    # (adamw_torch under a wrapper: nothing)
    copies = 2 if cast else 0
    return {"adam": 1 + copies, "adamw_torch": 0, "adafactor": 2 + copies}[step.optimizer] * max_tensor_bytes(step)


def update_bucket_bytes(step: Step) -> float:
    """The fp32 bytes that a bucketed update (``adamw_torch``'s memory-efficient one,
    ``adafactor_batched``) converts at once: ``MASTER_BUCKET_BYTES``, or every weight where they
    hold less, or the largest weight where it holds more."""
    return max(max_tensor_bytes(step), min(MASTER_BUCKET_BYTES, 4 * parameters(step)))


def max_tensor_bytes(step: Step) -> float:
    """The largest weight in fp32 (the embedding): what a per-parameter optimizer loop
    allocates at once."""
    return 4 * step.arch.vocab * step.arch.embed_dim
