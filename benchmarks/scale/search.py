"""What the decoding rows (4-6) share: a timed beam search of bart.large over random paged
documents, its record (measured, OOM, or not tried after an OOM), and the bytes a step must
read against the memory-bandwidth bound."""

import argparse
import re
import sys
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import torch

from benchmarks.beam_cache import DecoderCalls
from benchmarks.common import ModelSize, build_model, cuda_peaks, paged_source
from benchmarks.generation_speed import net_input
from benchmarks.scale import costs
from benchmarks.scale.group import Context
from benchmarks.scale.kernels import AttentionKernels
from benchmarks.scale.oom import unless_oom
from benchmarks.scale.tables import number, verdict
from pagesum_plugin.profiling import synchronize

BANDWIDTH_GOAL = 1.5  # a step within 1.5x the bound of the bytes it must read


# ---- one timed beam search -------------------------------------------------------------------


@dataclass(frozen=True)
class Search:
    seconds: float  # the fastest search
    step: float  # its mean interval between decoder calls (the encoder pass is not in it)
    calls: int  # its decoder calls
    length: float  # mean summary tokens of the best hypotheses
    memory: Dict[str, Optional[int]]  # peaks over the searches: allocated, reserved, device (None on the CPU)


def timed_search(make: Callable[[int], object], model, sample, repeats: int, device: torch.device,
                 forced: Optional[int] = None) -> Search:
    """The fastest of ``repeats`` searches by ``make(None)``'s generator, after a two-token
    warm-up by ``make(2)``'s; ``forced``: the summary length every hypothesis must have."""
    make(2).generate([model], sample)
    generator = make(None)
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    best = None
    for _ in range(repeats):
        with DecoderCalls(model, device) as calls:
            synchronize(device)
            start = time.perf_counter()
            hypos = generator.generate([model], sample)
            synchronize(device)
            seconds = time.perf_counter() - start
        lengths = [len(h[0]["tokens"]) - 2 for h in hypos]  # less <s> and </s>
        assert forced is None or set(lengths) == {forced}, f"summaries of {forced} tokens expected, got {lengths}"
        steps = calls.step_seconds()
        if best is None or seconds < best[0]:
            best = (seconds, sum(steps) / len(steps), len(calls.starts), sum(lengths) / len(lengths))
    gpu = cuda_peaks(device)
    memory = {"allocated": gpu and gpu.allocated, "reserved": gpu and gpu.reserved, "device": gpu and gpu.device}
    return Search(*best, memory)


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
            "length": result.length, **result.memory}


@dataclass(frozen=True)
class Variant:
    """One system of a decoding row: its name (in the ledger and the records), the fields its
    records carry, and its generator, made by ``make(model, dictionary, length)`` (length 2: the
    warm-up search; None: the row's own)."""

    system: str
    fields: Dict
    make: Callable[[object, object, Optional[int]], object]
    shared: Optional[bool] = True  # pages shared by the beams (the bound's bytes); None: no bound


def measure_searches(s: Dict, ctx: Context, row: str, length: int, variants: List[Variant],
                     forced: Optional[int] = None) -> List[Dict]:
    """bart.large with random weights, and for every batch of ``s`` and every variant, in that
    order, the record of a timed search of summaries of at most ``length`` tokens (exactly
    ``forced``, where given) and the bytes a step must read; each record also names the attention
    kernels that ran in a two-token search."""
    dictionary, model = build_decoder_model(ctx.size, s["page_len"], length + 2, s["seed"], ctx)
    samples = decoding_samples(dictionary, s["batches"], s["pages"], s["page_len"], s["seed"], ctx.device)
    kernels = AttentionKernels(model)
    with kernels:
        variants[0].make(model, dictionary, 2).generate([model], samples[s["batches"][0]])
    records = []
    for batch, sample in samples.items():
        for variant in variants:
            def search():
                make = lambda n: variant.make(model, dictionary, n)  # noqa: E731
                return timed_search(make, model, sample, s["repeats"], ctx.device, forced)

            record = searched(ctx, row, variant.system, [length, batch], search)
            record.update(batch=batch, kernels=kernels.describe(), **variant.fields)
            if record["status"] == "ok" and variant.shared is not None:
                record["read"] = read_per_step(model, s, batch, record["calls"], variant.shared)
            records.append(record)
            print(f"row {row}: {length} tokens, batch {batch}, {variant.system}: {record['status']}",
                  file=sys.stderr, flush=True)
    return records


def decoding_settings(args: argparse.Namespace, **extra) -> Dict:
    return dict(batches=args.batches, beam=args.beam, pages=args.decode_pages, page_len=args.page_len,
                repeats=args.repeats, seed=args.seed, **extra)


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


