"""What the decoding rows (4-6) share: a timed beam search of bart.large over random paged
documents, its record (measured, OOM, or not tried after an OOM), and the bytes a step must
read against the memory-bandwidth bound."""

import argparse
import contextlib
import re
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, TypeVar

import torch

from benchmarks.beam_cache import DecoderCalls, generator_for
from benchmarks.common import ModelSize, build_model, cuda_peaks, paged_source
from benchmarks.generation_speed import net_input
from benchmarks.scale import costs
from benchmarks.scale.group import Context
from benchmarks.scale.kernels import AttentionKernels, kernel_record, kernel_seconds
from benchmarks.scale.oom import unless_oom
from benchmarks.scale.tables import number, verdict
from pagesum_recipes.profiling import best_seconds, synchronize

BANDWIDTH_GOAL = 1.5  # a step within 1.5x the bound of the bytes it must read
T = TypeVar("T")
PROFILED_LENGTHS = (8, 40)  # two short profiled searches: their difference is 32 steps, the encoder cancelled


# ---- one timed beam search -------------------------------------------------------------------


@dataclass(frozen=True)
class Search:
    seconds: float  # the fastest search
    step: float  # its mean interval between decoder calls (the encoder pass is not in it)
    calls: int  # its decoder calls
    length: float  # mean summary tokens of the best hypotheses
    memory: Dict[str, Optional[int]]  # peaks over the searches: allocated, reserved, device (None on the CPU)
    busy: Optional[Dict] = None  # where a step's device time goes (``step_kernels``); None unasked
    first: Optional[float] = None  # a captured search: its generator's first search, the capture included


def step_kernels(make: Callable[[int], object], model, sample, device: torch.device,
                 captured: bool = False, longest: Optional[int] = None) -> Dict:
    """Where one decoding step's GPU time goes: its kernels' own times, as torch's profiler
    records them (``kernels.kernel_record``: summed, by kind, the longest); the difference
    between searches of ``PROFILED_LENGTHS`` tokens, per step between them, so that the
    encoder's kernels cancel. Its ``busy_s`` is, on CUDA, what a step would take if the host
    launched nothing (on the CPU, the operators' own times). A captured search's generator
    searches once unprofiled first: its capture. ``longest``: the longest summary the model
    decodes, where shorter than the lengths (the CPU's smoke sizes), which then shrink to it and
    its half."""
    lengths = PROFILED_LENGTHS if longest is None or longest >= PROFILED_LENGTHS[1] else (longest // 2, longest)
    profiles, steps = [], []
    for length in lengths:
        generator = make(length)
        if captured:
            generator.generate([model], sample)
        with DecoderCalls(model, device) as counted:
            profiles.append(kernel_seconds(lambda: generator.generate([model], sample), device))
        steps.append(length if captured else len(counted.starts))  # a captured step calls no decoder from Python
    per_step = 1 / (steps[1] - steps[0])
    names = set(profiles[0]) | set(profiles[1])
    return kernel_record({name: (profiles[1].get(name, 0.0) - profiles[0].get(name, 0.0)) * per_step
                          for name in names})


def timed_search(make: Callable[[int], object], model, sample, repeats: int, device: torch.device,
                 forced: Optional[int] = None, busy: bool = False, encoder_s: Optional[float] = None) -> Search:
    """The fastest of ``repeats`` searches by ``make(None)``'s generator, after a two-token
    warm-up by ``make(2)``'s; ``forced``: the summary length every hypothesis must have;
    ``busy``: also where a step's GPU time goes (``step_kernels``). A step is the interval
    between decoder calls; with ``encoder_s`` given (a search whose steps replay a captured
    graph, which calls no decoder from Python), the search's time less ``encoder_s`` per step, and
    the generator's first search, which captures the step that the later ones replay (kept by
    the generator), is timed apart."""
    first = None
    if encoder_s is None:  # the warm-up: two tokens
        make(2).generate([model], sample)
        generator = make(None)
    else:  # the warm-up is the generator's first search, which captures (and compiles) its step
        generator = make(None)
        synchronize(device)
        start = time.perf_counter()
        generator.generate([model], sample)
        synchronize(device)
        first = time.perf_counter() - start
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    best = None
    for _ in range(repeats):
        with contextlib.nullcontext() if encoder_s is not None else DecoderCalls(model, device) as calls:
            synchronize(device)
            start = time.perf_counter()
            hypos = generator.generate([model], sample)
            synchronize(device)
            seconds = time.perf_counter() - start
        lengths = [len(h[0]["tokens"]) - 2 for h in hypos]  # less <s> and </s>
        assert forced is None or set(lengths) == {forced}, f"summaries of {forced} tokens expected, got {lengths}"
        if calls is None:  # one step per position: the forced <s>, the summary, </s>
            steps = max(lengths) + 2
            step = (seconds - encoder_s) / steps
        else:
            steps, step = len(calls.starts), statistics.fmean(calls.step_seconds())
        if best is None or seconds < best[0]:
            best = (seconds, step, steps, sum(lengths) / len(lengths))
    gpu = cuda_peaks(device)
    memory = {"allocated": gpu and gpu.allocated, "reserved": gpu and gpu.reserved, "device": gpu and gpu.device}
    kernels = unless_profiler_fails(step_kernels, make, model, sample, device, encoder_s is not None,
                                    forced) if busy else None
    return Search(*best, memory, kernels, first)


def unless_profiler_fails(measure: Callable[..., T], *args) -> Optional[T]:
    """``measure(*args)``, or None, said on stderr, where torch's profiler fails (a GPU machine
    without CUPTI, say): the search's own timings stand without it."""
    try:
        return measure(*args)
    except Exception as error:  # the profiler's failure must not cost the row's timings
        print(f"GPU busy time not measured: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
        return None


def build_decoder_model(size: ModelSize, page_len: int, max_target: int, seed: int, ctx: Context):
    torch.manual_seed(seed)
    task, model = build_model("pagesum_bart_large", size, "--max-source-positions", str(page_len),
                              "--max-target-positions", str(max_target), dropout=0.0)
    return task.dictionary, model.to(device=ctx.device, dtype=ctx.dtype).eval()


def decoding_samples(dictionary, batches: List[int], pages: int, page_len: int, seed: int, device) -> Dict[int, Dict]:
    """batch -> the generator's sample of ``batch`` random documents of ``pages`` pages."""
    generator = torch.Generator().manual_seed(seed)
    return {batch: net_input(paged_source(dictionary, batch, pages, page_len, generator).to(device),
                             dictionary.pad())
            for batch in batches}


def weight_bytes(model) -> int:
    """The decoder weights a step reads: all but the cross-attention k/v projections and the positions."""
    return sum(p.numel() * p.element_size() for name, p in model.decoder.named_parameters()
               if not re.search(r"encoder_attn\.[kv]_proj\.|^embed_positions\.", name))


def read_per_step(model, s: Dict, batch: int, calls: int, shared: bool) -> Dict[str, float]:
    """Bytes one step of a search of ``calls`` decoder calls must read at its mean cache length
    (``costs.step_bytes``)."""
    element = next(model.parameters()).element_size()
    return costs.step_bytes(weight_bytes(model), len(model.decoder.layers), model.decoder.embed_dim, element,
                            batch, s["beam"], s["pages"], s["page_len"], (calls + 1) / 2, shared)


def searched(ctx: Context, row: str, system: str, point: List[int], search: Callable[[], Search]) -> Dict:
    """A configuration's record: measured, OOM, or not tried after an OOM of ``system`` at a
    configuration no larger (``ctx.ledger``)."""
    record = {"system": system, "point": point}
    stopped = ctx.ledger.stopped_at(row, system, point)
    if stopped is not None:
        return {**record, "status": "not tried", "stopped_at": list(stopped)}
    result = unless_oom(search, ctx.device)
    if result is None:
        ctx.ledger.record(row, system, point)
        return {**record, "status": "oom"}
    return {**record, "status": "ok", "search_s": result.seconds, "step_s": result.step, "calls": result.calls,
            "length": result.length, "busy_step_s": result.busy and result.busy["busy_s"],
            "step_kernels": result.busy, "first_search_s": result.first, **result.memory}


@dataclass(frozen=True)
class Variant:
    """One system of a decoding row: its name (in the ledger and the records), the fields its
    records carry, and its generator, made by ``make(model, dictionary, length)`` (length 2: the
    warm-up search; None: the row's own)."""

    system: str
    fields: Dict
    make: Callable[[object, object, Optional[int]], object]
    shared: Optional[bool] = True  # pages shared by the beams (the bound's bytes); None: no bound
    captured: bool = False  # its steps replay a captured graph: timed by the search, less the encoder


def measure_searches(s: Dict, ctx: Context, row: str, length: int, variants: List[Variant],
                     forced: Optional[int] = None, busy: bool = False) -> List[Dict]:
    """bart.large with random weights, and for every batch of ``s`` and every variant, in that
    order, the record of a timed search of summaries of at most ``length`` tokens (exactly
    ``forced``, where given) and the bytes a step must read (``busy``: and the GPU's busy time
    per step); each record also names the attention kernels that ran in a two-token search."""
    started = time.perf_counter()
    dictionary, model = build_decoder_model(ctx.size, s["page_len"], length + 2, s["seed"], ctx)
    samples = decoding_samples(dictionary, s["batches"], s["pages"], s["page_len"], s["seed"], ctx.device)
    kernels = AttentionKernels(model)
    with kernels:  # the step loop's: torch.compile, which a fused search runs, refuses a dispatch mode
        generator_for(model, dictionary, s["beam"], 2, True).generate([model], samples[s["batches"][0]])
    records = []
    for batch, sample in samples.items():
        with torch.no_grad():  # what a captured search spends outside its steps
            encoder_s = best_seconds(lambda: model.encoder(sample["net_input"]["src_tokens"]), ctx.device, repeats=3)
        for variant in variants:
            def search():
                make = lambda n: variant.make(model, dictionary, n)  # noqa: E731
                return timed_search(make, model, sample, s["repeats"], ctx.device, forced, busy,
                                    encoder_s if variant.captured else None)

            record = searched(ctx, row, variant.system, [length, batch], search)
            record.update(batch=batch, kernels=kernels.describe(), **variant.fields)
            if record["status"] == "ok" and variant.shared is not None:
                record["read"] = read_per_step(model, s, batch, record["calls"], variant.shared)
            records.append(record)
            print(f"row {row}: {length} tokens, batch {batch}, {variant.system}: {progress(record)}, "
                  f"{time.perf_counter() - started:.0f} s into the group", file=sys.stderr, flush=True)
    return records


def progress(record: Dict) -> str:
    """A search's numbers for the log as soon as it has them: a group's records reach the results
    file only when it ends, and a group cut off by its time box must not lose what it measured."""
    if record["status"] != "ok":
        return record["status"]
    busy, first, reserved = record["busy_step_s"], record["first_search_s"], record["reserved"]
    return ", ".join([f"search {record['search_s']:.3f} s", f"{record['step_s'] * 1e3:.2f} ms/step",
                      "busy -" if busy is None else f"busy {busy * 1e3:.2f} ms/step",
                      "first search -" if first is None else f"first search {first:.2f} s",
                      "reserved -" if reserved is None else f"reserved {reserved / 1e9:.2f} GB"])


def decoding_settings(args: argparse.Namespace, **extra) -> Dict:
    return dict(batches=args.batches, beam=args.beam, pages=args.decode_pages, page_len=args.page_len,
                repeats=args.repeats, seed=args.seed, **extra)


def busy_cell(record: Dict) -> str:
    """The busy ms per step ("-" where it was not measured: before the profiled searches)."""
    busy = record.get("busy_step_s")
    return "-" if busy is None else number(busy * 1e3)


def bound_cells(record: Dict, bandwidth: Optional[float]) -> List[str]:
    """MB/step, bound ms, step / bound."""
    read = sum(record["read"].values())
    if not bandwidth:
        return [number(read / 1e6), "-", "-"]
    bound = read / bandwidth
    return [number(read / 1e6), number(bound * 1e3), f"{record['step_s'] / bound:.2f}x"]


def within_bound(record: Dict, run: Dict) -> str:
    bandwidth = run["peaks"]["bandwidth"]
    ok = None if not bandwidth else record["step_s"] <= BANDWIDTH_GOAL * sum(record["read"].values()) / bandwidth
    return verdict(ok, run["device"], "--peak-bandwidth")


