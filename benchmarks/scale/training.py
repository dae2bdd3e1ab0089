"""Rows 1-3: training at bart.large scale. Peak memory of one bf16 update with checkpointing
(1), memory growth with the number of pages against full-attention BART (2), and throughput
as model FLOP utilization at every batch that fits (3)."""

import argparse
import contextlib
import logging
import sys
import tempfile
import time
import warnings
from typing import Callable, Dict, List, Optional, Tuple

import torch
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim.fp16_optimizer import FP16Optimizer, MemoryEfficientFP16Optimizer
from torch.nn.attention import sdpa_kernel

from benchmarks import memory_scaling
from benchmarks.beam_cache import tensor_bytes
from benchmarks.common import (ATTENTION_KERNELS, ModelSize, best_seconds, criterion_and_sample, cuda_peaks,
                               free_memory, make_dictionary, paged_source, summary_io)
from benchmarks.graph_standin import capture_options
from benchmarks.scale import costs
from benchmarks.scale.group import Context, Group
from benchmarks.scale.kernels import (KERNEL_KINDS, KIND_HEADER, AttentionKernels, kernel_record, kernel_seconds,
                                      kind_shares)
from benchmarks.scale.oom import unless_oom
from benchmarks.scale.search import unless_profiler_fails
from benchmarks.scale.tables import GB, gigabytes, keyed, not_run, number, peak_text, section, verdict
from pagesum_plugin.architectures import LOSS_CHUNK_TOKENS
from pagesum_plugin.checkpoints import builder
from pagesum_plugin.memory.model import Step, predict
from pagesum_plugin.modules.compiled_layers import compile_model_layers
from pagesum_plugin.training_capture import WARMUP_PASSES, CapturedTraining
from pagesum_recipes.profiling import PeakMemory, peak_memory, synchronize

MEMORY_GOAL = 12 * GB  # reserved by one update of PageSum-large at 20 x 1024 + 1,024 summary tokens
LINEAR_SLACK = 1.25  # PageSum's growth counts as linear up to 1.25x the page ratio
MFU_GOAL = 0.40  # at the largest batch
MFU_GOAL_BATCH_1 = 0.30
BATCH_1_GOAL_TEXT = f"MFU >= {MFU_GOAL_BATCH_1:.0%} at batch 1"
# the loss of rows 1 and 3, as records name it; the first four visits' records have none: they took it on the
# whole summary's logits at once
LOSS = f"the recipes' criterion, {LOSS_CHUNK_TOKENS} summary tokens at a time"
EARLIER_LOSS = "fp32 cross entropy on the whole summary's logits"
PROFILED_BATCHES = (1, 8)  # row 3: the batches of the MFU goals, where one update's kernels are profiled
CLIP_NORM = 0.0  # the PageSum recipes' (fairseq's trainer takes the gradients' norm at every update all the same)
PROFILE_SECONDS = 2.0  # the profiler's start and its processing of an update's events (a guess: not yet timed)


# ---- training with fairseq's bf16 optimizer ----------------------------------------------------


def build_trainable(size: ModelSize, page_len: int, device: torch.device, dtype: torch.dtype, *flags: str):
    """(task, model, optimizer): PageSum of ``size`` in ``dtype``, in training mode, and
    the optimizer fairseq-train builds for ``--bf16 --optimizer adam`` (``flags`` may name
    another, and ``--memory-efficient-bf16``): ``FP16Optimizer`` (fp32 master weights and
    gradients) around ``FairseqAdam``, or ``MemoryEfficientFP16Optimizer`` (none). The
    optimizer is built from fairseq's parsed options, which ``common.build_model`` keeps to
    itself."""
    with tempfile.TemporaryDirectory() as data_dir:
        builder.dictionary_directory(make_dictionary(size), data_dir)
        fairseq_args, task, model = builder.build_model(
            data_dir, "pagesum_bart_large", "--dropout", "0.1", *size.arch_args(), "--max-source-positions",
            str(page_len), "--bf16", "--optimizer", "adam", "--lr", "1e-4", *flags)
    model.to(device=device, dtype=dtype).train()
    logging.getLogger("hydra").setLevel(logging.WARNING)  # fairseq composes its config with hydra
    with warnings.catch_warnings():  # hydra's deprecation notices
        warnings.simplefilter("ignore")
        cfg = convert_namespace_to_omegaconf(fairseq_args)
    wrapper = MemoryEfficientFP16Optimizer if "--memory-efficient-bf16" in flags else FP16Optimizer
    optimizer = wrapper.build_optimizer(cfg, [p for p in model.parameters() if p.requires_grad])
    return task, model, optimizer


def update_step(model, optimizer, task, src_tokens, target, prev_output_tokens,
                chunk_backend: Optional[str] = None, captured: bool = False) -> Callable[[], None]:
    """One update as fairseq's trainer makes it with the recipes' criterion: zero the gradients,
    forward, the plugin's label-smoothed loss ``LOSS_CHUNK_TOKENS`` summary tokens at a time
    (each chunk compiled by ``chunk_backend`` where given, as ``--compile-layers`` does), backward
    through the optimizer, the gradients times 1 / sample size, their norm (``CLIP_NORM``), step.
    ``captured``: the pass replayed from CUDA graphs (``--capture-training``), captured by the
    first call; on the CPU, their stand-in (``graph_standin.py``).
    src_tokens (batch, pages, page_len); target and prev_output_tokens (batch, tgt_len)."""
    criterion, sample = criterion_and_sample(task, src_tokens, target, prev_output_tokens, LOSS_CHUNK_TOKENS)
    if chunk_backend is not None:
        criterion.compile_chunks(chunk_backend)
    if captured:
        capturing = CapturedTraining(criterion, **capture_options(src_tokens.device))

        def step():
            optimizer.zero_grad()
            _, sample_size, _ = capturing.train_step(model, sample, optimizer)  # its backward included
            trainer_update(optimizer, None, sample_size)

        return step

    def step():
        optimizer.zero_grad()
        loss, sample_size, _ = criterion(model, sample)
        trainer_update(optimizer, loss, sample_size)

    return step


def trainer_update(optimizer, loss: Optional[torch.Tensor], sample_size, clip_norm: float = CLIP_NORM) -> None:
    """What fairseq's trainer does with a batch's summed ``loss``: backward through the optimizer
    (its wrapper; None: done), the gradients times 1 / ``sample_size``, their norm (clipped to
    ``clip_norm`` where it is positive), a step."""
    if loss is not None:
        optimizer.backward(loss)
    optimizer.multiply_grads(1.0 / sample_size)
    optimizer.clip_grad_norm(clip_norm)
    optimizer.step()


def measure_update(step: Callable[[], None], model, optimizer, device: torch.device, repeats: int,
                   kernels: Optional[AttentionKernels] = None) -> Optional[Dict]:
    """The memory fields (``memory_fields``) of one update and ``update_s``, the fastest of
    ``repeats`` updates, after a warm-up update (under ``kernels`` if given), which creates
    Adam's state; None when the device runs out of memory. ``common.measure_step`` reports only
    the memory a step adds, and its CPU tracker would not see the optimizer's master copy: here
    the model, the master weights and gradients and Adam's moments are all tracked."""

    def measure():
        try:
            with kernels or contextlib.nullcontext():
                step()
            seconds = best_seconds(step, device, repeats, warmup=0)
            optimizer.zero_grad()  # held before an update: weights, master weights and gradients, Adam's moments
            masters = getattr(optimizer, "fp32_params", [])  # a list (fairseq keeps bf16 masters apart); none
            peak = peak_memory(step, device, [model, optimizer.optimizer, *masters, *(p.grad for p in masters)])
            return {**memory_fields(peak, device), "update_s": seconds}
        finally:
            optimizer.zero_grad()

    return unless_oom(measure, device)


def kernel_times(step: Callable[[], None], device: torch.device) -> Dict:
    """Where one update's device time goes: ``step`` once under torch's profiler
    (``kernels.kernel_record``)."""
    return kernel_record(kernel_seconds(step, device))


def memory_fields(peak: PeakMemory, device: torch.device) -> Dict[str, Optional[int]]:
    """Bytes held before a call and its peaks: tensors (``allocated``), the caching allocator's
    (``reserved``) and the whole GPU's (``device``: with the CUDA context); the last two None on
    the CPU."""
    gpu = cuda_peaks(device)
    return {"before": peak.before, "allocated": peak.peak, "reserved": gpu and gpu.reserved,
            "device": gpu and gpu.device}


def optimizer_bytes(model, optimizer) -> Dict[str, int]:
    """What an update starts from, by kind; a storage counts once, under its first kind (an
    fp32 model's master weights are its own weights: ``p.float()`` does not copy)."""
    # fairseq's wrapper's, or (memory-efficient wrapper) those adamw_torch keeps in its state
    masters = getattr(optimizer, "fp32_params", []) or [state["master"] for state in optimizer.optimizer.state.values()
                                                         if "master" in state]
    moments = [t for state in optimizer.optimizer.state.values() for t in state.values() if torch.is_tensor(t)]
    kinds = {"weights": list(model.parameters()), "fp32 master": masters,
             "fp32 gradients": [p.grad for p in masters if p.grad is not None], "optimizer state": moments}
    held, counted = {}, []
    for kind, tensors in kinds.items():
        before = tensor_bytes(counted)
        counted += tensors
        held[kind] = tensor_bytes(counted) - before
    return held


def training_batch(dictionary, batch: int, pages: int, page_len: int, tgt_len: int, seed: int, device):
    """(src_tokens (batch, pages, page_len), target, prev_output_tokens (batch, tgt_len)) on device."""
    generator = torch.Generator().manual_seed(seed)
    src_tokens = paged_source(dictionary, batch, pages, page_len, generator)
    target, prev_output_tokens = summary_io(dictionary, batch, tgt_len, generator)
    return src_tokens.to(device), target.to(device), prev_output_tokens.to(device)


def settings_of(measurement: Dict, runs: Dict[str, Dict]) -> Tuple[Dict, str]:
    """(the group's settings, the device type) of the run that made ``measurement``."""
    run = runs[measurement["run"]]
    return run["settings"], run["device"]


# ---- row 1: training peak memory ------------------------------------------------------------


def memory_groups(args: argparse.Namespace) -> List[Group]:
    settings = dict(pages=args.pages, page_len=args.page_len, tgt_len=args.tgt_len, repeats=args.repeats,
                    seed=args.seed)
    return [Group("1", "1", f"training peak memory at {args.pages} x {args.page_len}", settings, measure_memory,
                  memory_cost)]


# row 1's optimizers: fairseq's Adam; the project's fused AdamW under fairseq's bf16 wrapper (fp32 master
# weights and gradients) and under its memory-efficient one (the optimizer keeps the fp32 master weights, no
# fp32 gradients); and Adafactor (the HEPOS and PageSum authors') under the memory-efficient wrapper, which
# keeps no fp32 copy, in fairseq's loop over the parameters and batched by shape (adafactor_batched, the same
# update). Each with its goal (reserved bytes).
OPTIMIZERS = {
    "adam": (("--optimizer", "adam"), MEMORY_GOAL),
    "adamw_torch": (("--optimizer", "adamw_torch"), 11 * GB),
    "adamw_torch_memory_efficient": (("--optimizer", "adamw_torch", "--memory-efficient-bf16"), 11 * GB),
    "adafactor": (("--optimizer", "adafactor", "--memory-efficient-bf16"), 8 * GB),
    "adafactor_batched": (("--optimizer", "adafactor_batched", "--memory-efficient-bf16"), 8 * GB),
}
# row 3's: the recipes' optimizer, under the wrapper whose update launches 21 kernels at bart.large's size, where
# --bf16's launches 1,553 (benchmarks.update_operators); fairseq's Adam before the fifth visit, adamw_torch under
# --bf16 in it
THROUGHPUT_OPTIMIZER = "adamw_torch_memory_efficient"


def memory_cost(s: Dict, size: ModelSize, element: int) -> costs.Cost:
    update = costs.training_pass(size, 1, s["pages"], s["page_len"], s["tgt_len"], checkpointing=True,
                                 optimizer=True)
    return costs.start() + (costs.build(size) + update.times(s["repeats"] + 2)).times(len(OPTIMIZERS))


def predicted_peak(size: ModelSize, dtype: torch.dtype, s: Dict, name: str) -> float:
    """What the memory model (``pagesum-plan``) predicts for row 1's update with ``name``."""
    flags = OPTIMIZERS[name][0]
    step = Step("pagesum", costs.memory_architecture(size), s["pages"], s["page_len"], s["tgt_len"],
                dtype="fp32" if dtype == torch.float32 else "bf16", checkpointing=True,
                optimizer=flags[flags.index("--optimizer") + 1], master_weights="--memory-efficient-bf16" not in flags)
    return predict(step).peak


def measure_memory(s: Dict, ctx: Context) -> List[Dict]:
    records = []
    for name, (flags, goal) in OPTIMIZERS.items():
        task, model, optimizer = build_trainable(ctx.size, s["page_len"], ctx.device, ctx.dtype,
                                                 "--checkpoint-activations", *flags)
        inputs = training_batch(task.dictionary, 1, s["pages"], s["page_len"], s["tgt_len"], s["seed"], ctx.device)
        kernels = AttentionKernels(model)
        measured = measure_update(update_step(model, optimizer, task, *inputs), model, optimizer, ctx.device,
                                  s["repeats"], kernels)
        print(f"row 1: {s['pages']} pages, {' '.join(flags)}: {measured}", file=sys.stderr, flush=True)
        records.append({"system": "PageSum", "point": [s["pages"]], "status": "oom" if measured is None else "ok",
                        "held": optimizer_bytes(model, optimizer), "kernels": kernels.describe(),
                        "optimizer": f"{type(optimizer).__name__} ({type(optimizer.optimizer).__name__})",
                        "flags": " ".join(flags), "goal": goal, "loss": LOSS,
                        "predicted": predicted_peak(ctx.size, ctx.dtype, s, name), **(measured or {})})
        del model, optimizer, inputs
        free_memory(ctx.device)
    return records


def render_memory(measurements: List[Dict], runs: Dict[str, Dict]) -> List[str]:
    header = ["pages", "source tokens", "summary tokens", "held GB", "predicted peak GB", "peak allocated GB",
              "peak reserved GB", "peak on the GPU GB", "update s", "goal", "verdict"]
    sections = []
    for m in measurements:
        s, device = settings_of(m, runs)
        limit = m.get("goal", MEMORY_GOAL)  # the first GPU visit's records: Adam's goal
        goal = f"reserved <= {limit / GB:.0f} GB" + (" (AWESOME paper: HF PageSum 24.9 GB)" if limit == MEMORY_GOAL
                                                       else "")
        predicted = gigabytes(m["predicted"]) if "predicted" in m else "-"
        row = [s["pages"], s["pages"] * s["page_len"], s["tgt_len"]]
        if m["status"] != "ok":
            row += ["-", predicted] + [not_run(m)] * 4 + [goal, verdict(False, device)]
        else:
            judged = m["reserved"] if m["reserved"] is not None else m["allocated"]
            row += [gigabytes(m["before"]), predicted, gigabytes(m["allocated"]), gigabytes(m["reserved"]),
                    gigabytes(m["device"]), number(m["update_s"]), goal, verdict(judged <= limit, device)]
        flags = f" ({m['flags']})" if "flags" in m else ""
        caption = (
            f"Row 1, training peak memory: PageSum, batch 1, {runs[m['run']]['dtype']} model, activation "
            f"checkpointing (fairseq's checkpoint_wrapper on every layer), one update: forward, loss "
            f"({m.get('loss', EARLIER_LOSS)}), backward, {m['optimizer']} step{flags}. Held before the update: "
            + ", ".join(f"{name} {gigabytes(value)} GB" for name, value in m["held"].items())
            + ". Predicted: the memory model's peak (pagesum-plan), before the run. Peaks: allocated = tensors; "
            f"reserved = the caching allocator's hold; on the GPU = reserved plus the CUDA context and library "
            f"workspaces, as nvidia-smi shows it (\"-\" on the CPU). GB = 10^9 bytes; update s: best of "
            f"{s['repeats']}. Attention kernels that ran: {m['kernels']}."
        )
        sections.append(section(caption, header, [row]))
    return sections


# ---- row 2: memory growth, PageSum against full attention -----------------------------------


def growth_groups(args: argparse.Namespace) -> List[Group]:
    settings = dict(pages=args.growth_pages, page_len=args.page_len, tgt_len=args.growth_tgt_len,
                    repeats=args.repeats, seed=args.seed)
    return [Group("2", "2", f"memory growth over {args.growth_pages} pages", settings, measure_growth,
                  growth_cost)]


def growth_cost(s: Dict, size: ModelSize, element: int) -> costs.Cost:
    steps = costs.Cost()
    for n in s["pages"]:
        steps += costs.training_pass(size, 1, n, s["page_len"], s["tgt_len"])  # PageSum
        steps += costs.training_pass(size, 1, 1, n * s["page_len"], s["tgt_len"])  # BART on one sequence
    return costs.start() + costs.build(size, models=2) + steps.times(2 * (s["repeats"] + 2))  # fused, math


def measure_growth(s: Dict, ctx: Context) -> List[Dict]:
    settings = argparse.Namespace(**s)
    dictionary, models, size = memory_scaling.build_pair(settings, ctx.device, ctx.dtype, ctx.size)
    dims = f"{size.layers}+{size.layers} layers, d={size.embed_dim}"
    records = []
    for kernel in ("fused", "math"):
        with sdpa_kernel(ATTENTION_KERNELS[kernel]):
            rows = memory_scaling.measure(settings, dictionary, models, ctx.device)
        for name in memory_scaling.MODELS:
            first_oom = next((row["pages"] for row in rows if row["tried"][name] and row[name] is None), None)
            for row in rows:
                status = "ok" if row[name] is not None else "oom" if row["tried"][name] else "not tried"
                records.append({"system": f"{name} ({kernel})", "model": name, "kernel": kernel, "dims": dims,
                                "point": [row["pages"]], "pages": row["pages"], "tokens": row["tokens"],
                                "status": status, "stopped_at": [first_oom], **(row[name] or {})})
    return records


def growth_cell(record: Dict, base: Optional[Dict], ratio: float) -> Tuple[str, str, Optional[float]]:
    """(peak cell, growth cell, growth) of one model at one page count."""
    if record["status"] != "ok":
        return not_run(record), "-", None
    reserved = record.get("reserved_mb")
    peak = f"{record['mb']:.0f}" + ("" if reserved is None else f" / {reserved:.0f}")
    if base is None or base["status"] != "ok":
        return peak, "-", None
    growth = record["mb"] / base["mb"]
    return peak, f"{growth:.2f}x", growth


def render_growth(measurements: List[Dict], runs: Dict[str, Dict]) -> List[str]:
    if not measurements:
        return []
    s, _ = settings_of(measurements[0], runs)
    by_key = keyed(measurements, ("kernel", "model", "pages"))
    goal = f"PageSum growth <= {LINEAR_SLACK} x linear; where BART stops"
    table = []
    for kernel in ("fused", "math"):
        first = s["pages"][0]
        for pages in s["pages"]:
            ratio = pages / first
            cells, growth, bart = [kernel, pages, pages * s["page_len"], f"{ratio:.0f}x"], {}, ""
            for name in memory_scaling.MODELS:
                record = by_key[kernel, name, pages]
                peak, grown, growth[name] = growth_cell(record, by_key[kernel, name, first], ratio)
                cells += [peak, grown, number(record["s"]) if record["status"] == "ok" and "s" in record else "-"]
                if name == "BART":
                    bart = "BART runs" if record["status"] == "ok" else "BART stops (OOM)"
            if growth["PageSum"] is None:
                pagesum = "not met (PageSum OOM)"
            else:
                pagesum = "met (linear)" if growth["PageSum"] <= LINEAR_SLACK * ratio else "not met (super-linear)"
            table.append(cells + [goal, f"{pagesum}; {bart}"])
    run = runs[measurements[0]["run"]]
    caption = (
        f"Row 2, training peak memory growth: benchmarks.memory_scaling's step (forward + backward, no checkpointing, "
        f"no optimizer) of PageSum and of full-attention BART (positions extended to "
        f"{max(s['pages']) * s['page_len']}), {measurements[0]['dims']}, {run['dtype']}, pages of {s['page_len']} "
        f"tokens, {s['tgt_len']}-token summary, batch 1. Peak MB on top of the weights, allocated / reserved (reserved "
        f"on CUDA only); growth: allocated, against {s['pages'][0]} page(s). A model is not tried on more pages after "
        f"its first OOM. Step s: the fastest of {s['repeats']} steps (forward and backward). Attention: fused (SDPA kernels "
        f"allowed) and math (score matrices stored, as BART's original attention)."
    )
    header = ["attention", "pages", "tokens", "linear growth", "PageSum peak MB", "PageSum growth", "PageSum step s",
              "BART peak MB", "BART growth", "BART step s", "goal", "verdict"]
    return [section(caption, header, table)]


# ---- row 3: training throughput and model FLOP utilization --------------------------------


def throughput_groups(args: argparse.Namespace) -> List[Group]:
    settings = dict(pages=args.mfu_pages, page_len=args.page_len, tgt_len=args.tgt_len, max_batch=args.max_batch,
                    repeats=args.repeats, seed=args.seed)
    return [Group("3", "3", f"training throughput at {args.mfu_pages} x {args.page_len}", settings,
                  measure_throughput, throughput_cost)]


def doubling(largest: int) -> List[int]:
    """1, 2, 4, ... up to ``largest``."""
    return [2**i for i in range(largest.bit_length()) if 2**i <= largest]


def throughput_cost(s: Dict, size: ModelSize, element: int) -> costs.Cost:
    """Every batch up to the first that the memory model says runs out of memory, which costs a
    forward pass or so, eager and compiled, the compilation, and a profiled update at each of
    ``PROFILED_BATCHES`` (the profiler's own processing: ``PROFILE_SECONDS``); at those, the
    captured pass's updates too, its warm-up passes and capture among them."""
    updates, captured = costs.Cost(), costs.Cost()
    for batch in doubling(s["max_batch"]):
        update = costs.training_pass(size, batch, s["pages"], s["page_len"], s["tgt_len"], optimizer=True)
        if costs.training_peak_bytes(size, element, batch, s["pages"], s["page_len"], s["tgt_len"]) > \
                costs.GPU_MEMORY_BYTES:
            updates += update.times(1 / 3)
            break
        updates += update.times(s["repeats"] + 2)
        if batch in PROFILED_BATCHES:
            updates += update + costs.Cost(fixed=PROFILE_SECONDS)
            captured += update.times(s["repeats"] + 3 + WARMUP_PASSES + 1) + costs.Cost(fixed=PROFILE_SECONDS)
    return (costs.start() + costs.build(size).times(2) + updates.times(2) + captured
            + costs.Cost(fixed=costs.TRAINING_COMPILE_SECONDS))


def measure_throughput(s: Dict, ctx: Context) -> List[Dict]:
    """Every batch up to the first OOM with every layer compiled (``--compile-layers``: inductor
    on CUDA, ``aot_eager`` on the CPU), its first update's time (the compilation) recorded; then,
    at the ``PROFILED_BATCHES`` that fit, the same model's pass captured as CUDA graphs
    (``--capture-training``), a capture that fails recorded as failed; then the same with the
    layers eager. The compiled and the eager layers have a model each, built after the other's
    is gone: the compiled one first, so that neither the eager one's OOM nor its allocator's
    leftovers decide where the compiled one stops."""
    records = []
    for compiled in (True, False):
        task, model, optimizer = build_trainable(ctx.size, s["page_len"], ctx.device, ctx.dtype,
                                                 *OPTIMIZERS[THROUGHPUT_OPTIMIZER][0])
        counts, layers = costs.matmul_weights(model), len(model.encoder.layers)
        d = model.encoder.embed_tokens.embedding_dim
        formula = costs.flops_formula(counts, layers, d, s["pages"], s["page_len"], s["tgt_len"])
        compile_s, backend = None, None  # the layers' and the loss chunk's backend where they are compiled
        if compiled:
            backend = "inductor" if ctx.device.type == "cuda" else "aot_eager"
            compile_model_layers(model, backend)
            inputs = training_batch(task.dictionary, 1, s["pages"], s["page_len"], s["tgt_len"], s["seed"], ctx.device)
            started = time.perf_counter()
            unless_oom(update_step(model, optimizer, task, *inputs, chunk_backend=backend), ctx.device)
            synchronize(ctx.device)
            compile_s = time.perf_counter() - started
            optimizer.zero_grad()
            del inputs
        variants = ["compiled", "captured"] if compiled else ["eager"]
        fitted = []  # the compiled layers' batches that ran: the captured pass tries those it profiles
        for variant in variants:
            batches = doubling(s["max_batch"]) if variant != "captured" else \
                [b for b in PROFILED_BATCHES if b in fitted]
            for batch in batches:
                if variant == "captured":  # a graph's memory pool cannot take blocks the allocator keeps cached
                    free_memory(ctx.device)
                inputs = training_batch(task.dictionary, batch, s["pages"], s["page_len"], s["tgt_len"], s["seed"],
                                        ctx.device)
                update = update_step(model, optimizer, task, *inputs, chunk_backend=backend,
                                     captured=variant == "captured")
                record = {"system": f"PageSum, {variant} layers", "point": [batch], "batch": batch, "formula": formula,
                          "layers": variant, "compile_s": compile_s, "loss": LOSS, "compiled_loss": compiled,
                          "optimizer": THROUGHPUT_OPTIMIZER, "source_tokens": batch * s["pages"] * s["page_len"]}
                try:
                    measured = measure_update(update, model, optimizer, ctx.device, s["repeats"])
                    if measured is not None and batch in PROFILED_BATCHES:
                        measured["kernels"] = unless_profiler_fails(kernel_times, update, ctx.device)
                        optimizer.zero_grad()
                except Exception as error:  # noqa: BLE001 - a capture that fails is a result; the row goes on
                    if variant != "captured":
                        raise
                    optimizer.zero_grad()
                    record.update(status="failed", error=f"{type(error).__name__}: {str(error).splitlines()[0]}")
                    print(f"row 3: captured, batch {batch}: {record['error']}", file=sys.stderr, flush=True)
                    records.append(record)
                    continue
                finally:
                    del inputs, update
                print(f"row 3: {variant} layers, batch {batch}: {measured}", file=sys.stderr, flush=True)
                record["status"] = "oom" if measured is None else "ok"
                records.append(record)
                if measured is None:
                    break  # the first OOM: a larger batch cannot fit
                fitted.append(batch)
                flops = costs.training_flops(counts, layers, d, batch, s["pages"], s["page_len"], s["tgt_len"])
                record.update(measured, flops=flops,
                              mfu=ctx.peaks.flops and flops / measured["update_s"] / ctx.peaks.flops)
        del model, optimizer
        free_memory(ctx.device)
    return records


def kernel_cells(measurement: Dict) -> List[str]:
    """Row 3's GPU busy share and kernel time by kind, where the update was profiled; "-" else."""
    kernels = measurement.get("kernels")
    if not kernels or not kernels["busy_s"]:
        return ["-", "-"]
    return [f"{kernels['busy_s'] / measurement['update_s']:.0%}", kind_shares(kernels)]


def compiled_loss_note(measurements: List[Dict]) -> str:
    """What --compile-layers compiled beside the layers: since the fifth visit, the loss's chunk."""
    return ", and the loss's chunk" if any(m.get("compiled_loss") for m in measurements) else ", the loss eager"


def render_throughput(measurements: List[Dict], runs: Dict[str, Dict]) -> List[str]:
    if not measurements:
        return []
    s, device = settings_of(measurements[0], runs)
    run = runs[measurements[0]["run"]]
    goal = f"MFU >= {MFU_GOAL:.0%} at the largest batch"
    rows = []
    for variant in ("eager", "compiled", "captured"):  # the first GPU visit's records: eager layers only
        variant_rows, largest = [], None
        for m in sorted((m for m in measurements if m.get("layers", "eager") == variant), key=lambda m: m["batch"]):
            cells = [variant, m["batch"], m["source_tokens"]]
            if m["status"] != "ok":
                variant_rows.append(cells + [not_run(m)] * 10 + [goal, "-"])
                continue
            mfu = m.get("mfu")
            rate = m["flops"] / m["update_s"] / 1e12
            first = m["batch"] == 1  # the batch-1 goal's row: its verdict is its own
            variant_rows.append(cells + [number(m["update_s"]), number(m["flops"] / 1e12), number(rate),
                                         "-" if mfu is None else f"{mfu:.1%}", *kernel_cells(m),
                                         gigabytes(m["allocated"]),
                                         gigabytes(m["reserved"]), gigabytes(m["device"]),
                                         BATCH_1_GOAL_TEXT if first else goal,
                                         verdict(None if mfu is None else mfu >= MFU_GOAL_BATCH_1, device,
                                                 "--peak-tflops") if first else "-"])
            if not first:
                largest = (len(variant_rows) - 1, mfu)
        if not variant_rows:
            continue
        if largest is not None:
            index, mfu = largest
            variant_rows[index][-1] = verdict(None if mfu is None else mfu >= MFU_GOAL, device, "--peak-tflops")
        elif all(row[-1] == "-" for row in variant_rows):
            variant_rows[-1][-1] = verdict(False, device)  # not even batch 1 fits
        rows += variant_rows
    compiled = [m for m in measurements if m.get("compile_s") is not None]
    compile_note = f" Compiled: the first update, which compiles, took {compiled[0]['compile_s']:.1f} s." \
        if compiled else ""
    peak = run["peaks"]["flops"]
    caption = (
        f"Row 3, training throughput: PageSum, {s['pages']} pages of {s['page_len']} tokens, {s['tgt_len']}-token "
        f"summary, {run['dtype']}, no checkpointing, the update of row 1 (loss: "
        f"{measurements[0].get('loss', EARLIER_LOSS)}; optimizer: {measurements[0].get('optimizer', 'adam')}, a step "
        f"every update), with the layers eager and with every layer "
        f"compiled (--compile-layers{compiled_loss_note(measurements)}); batches doubled up to the first OOM or "
        f"--max-batch {s['max_batch']}; "
        f"captured: the compiled model with each batch's pass replayed from CUDA graphs (--capture-training; the "
        f"update eager; on the CPU, a stand-in for the graphs that runs the pass eager), at batches "
        f"{' and '.join(map(str, PROFILED_BATCHES))}; MFU at "
        f"every batch. {measurements[0]['formula']}. MFU = FLOPs / update s / {peak_text(peak, 'TFLOP/s', 'peak')}. "
        f"Update s: best of {s['repeats']}; peaks: everything held at the peak, optimizer included. At batches "
        f"{' and '.join(map(str, PROFILED_BATCHES))}, one more update under torch's profiler: GPU busy = its kernels' "
        f"own times / update s (what the host's launches leave idle is the rest), and their split by kind: "
        f"{', '.join(kind for kind, _ in KERNEL_KINDS)} (inductor's), other.{compile_note}"
    )
    header = ["layers", "batch", "source tokens", "update s", "TFLOP/update", "TFLOP/s", "MFU", "GPU busy", KIND_HEADER,
              "peak allocated GB",
              "peak reserved GB", "peak on the GPU GB", "goal", "verdict"]
    return [section(caption, header, rows)]
