"""Row 4: decoding throughput at bart.large scale. Beam search with each example's pages shared
by its beams against one copy per beam (the layout before beam sharing), both with the step
loop (eager), and the shared layout with every step replaying one captured CUDA graph (the
default on CUDA); the step time against the memory-bandwidth bound of the bytes a step must
read."""

import argparse
from typing import Dict, List, Optional

from benchmarks.beam_cache import generator_for
from benchmarks.common import ModelSize
from benchmarks.scale import costs
from benchmarks.scale.group import Context, Group
from benchmarks.scale.kernels import KERNEL_KINDS, KIND_HEADER, kind_shares
from benchmarks.scale.search import (BANDWIDTH_GOAL, Variant, bound_cells, busy_cell, decoding_settings,
                                     measure_searches, within_bound)
from benchmarks.scale.tables import gigabytes, first_run, keyed, not_run, number, peak_text, section, verdict

SHARING_GOAL = 2.0
CAPTURED_GOAL_MS = {1: 2.0, 8: 3.0}  # ms per step of the captured search, by batch
LAYOUTS = ("per beam", "shared", "shared, captured", "shared, fused")


# ---- row 4: decoding throughput, beam sharing and the bandwidth bound -------------------------


def throughput_groups(args: argparse.Namespace) -> List[Group]:
    """A group per summary length, and ``4:fused``: the shortest, its steps compiled by inductor
    and captured (apart, since the compilation is long and its value unmeasured)."""
    groups = [Group(f"4:{n}", "4", f"decoding throughput, {n}-token summaries", decoding_settings(args, out_len=n),
                    measure_throughput, throughput_cost) for n in args.out_lens]
    shortest = min(args.out_lens)
    return groups + [Group("4:fused", "4", f"decoding throughput, {shortest}-token summaries, fused steps",
                           decoding_settings(args, out_len=shortest), measure_fused, fused_cost)]


def throughput_cost(s: Dict, size: ModelSize, element: int) -> costs.Cost:
    searches = costs.Cost()
    for batch in s["batches"]:
        for shared in (False, True):
            shape = dict(batch=batch, beam=s["beam"], pages=s["pages"], page_len=s["page_len"], shared=shared)
            searches += costs.timed_searches(size, element, s["repeats"], s["out_len"], **shape)
            searches += costs.profiled_searches(size, element, **shape)
        captured = dict(batch=batch, beam=s["beam"], pages=s["pages"], page_len=s["page_len"], captured=True)
        searches += costs.timed_searches(size, element, s["repeats"], s["out_len"], **captured)
        searches += costs.profiled_searches(size, element, **captured).times(2)  # each captured first
    return costs.start() + costs.build(size) + searches


def fused_cost(s: Dict, size: ModelSize, element: int) -> costs.Cost:
    searches = costs.Cost(fixed=costs.COMPILE_SECONDS * len(s["batches"]))  # a compilation per batch's shapes
    for batch in s["batches"]:
        searches += costs.timed_searches(size, element, s["repeats"], s["out_len"], batch=batch, beam=s["beam"],
                                         pages=s["pages"], page_len=s["page_len"], captured=True)
    return costs.start() + costs.build(size) + searches


def measure_fused(s: Dict, ctx: Context) -> List[Dict]:
    """The shared layout, every step after the first compiled whole by inductor (its kernels fused)
    and, on CUDA, captured: the generator's ``decoding="fused"``."""
    def make(model, dictionary, n):
        return generator_for(model, dictionary, s["beam"], n or s["out_len"], True, decoding="fused")

    variant = Variant("shared, fused", {"out_len": s["out_len"], "layout": "shared, fused"}, make, True, True)
    return measure_searches(s, ctx, "4", s["out_len"], [variant], forced=s["out_len"])


def measure_throughput(s: Dict, ctx: Context) -> List[Dict]:
    fixed = "graph" if ctx.device.type == "cuda" else "static"  # the CPU runs the fixed-shape steps op by op

    def layout(name: str, shared: bool, captured: bool = False) -> Variant:
        def make(model, dictionary, n):
            return generator_for(model, dictionary, s["beam"], n or s["out_len"], shared,
                                 decoding=fixed if captured else "eager")
        return Variant(name, {"out_len": s["out_len"], "layout": name}, make, shared, captured)

    # the captured search first: the goals are its, and a group cut off by its time box keeps what it measured
    variants = [layout("shared, captured", True, captured=True), layout("shared", True), layout("per beam", False)]
    return measure_searches(s, ctx, "4", s["out_len"], variants, forced=s["out_len"], busy=True)


def captured_cells(m: Dict, eager: Optional[Dict], batch: int, run: Dict) -> List[str]:
    """speed-up, goal, verdict of the captured search: against the step loop, and its ms/step
    against the goal for its batch."""
    goal_ms = CAPTURED_GOAL_MS.get(batch)
    goal = "(no goal at this batch)" if goal_ms is None else f"step <= {goal_ms:g} ms"
    speedup = "-" if eager is None or eager["status"] != "ok" else f"{eager['search_s'] / m['search_s']:.2f}x"
    met = None if goal_ms is None else m["step_s"] * 1e3 <= goal_ms
    return [speedup, goal, "-" if met is None else f"step: {verdict(met, run['device'])}; bound: {within_bound(m, run)}"]


def render_throughput(measurements: List[Dict], runs: Dict[str, Dict]) -> List[str]:
    if not measurements:
        return []
    goal = f"shared >= {SHARING_GOAL:.0f}x per beam; step <= {BANDWIDTH_GOAL}x bound"
    by_key = keyed(measurements, ("out_len", "batch", "layout"), lambda key: (key[0], key[1], LAYOUTS.index(key[2])))
    rows = []
    for (out_len, batch, layout), m in by_key.items():
        run = runs[m["run"]]
        s = run["settings"]
        cells = [out_len, batch, layout]
        if m["status"] != "ok":
            rows.append(cells + [not_run(m)] * 10 + [goal if layout == "shared" else "(before sharing)",
                                                    verdict(False, run["device"]) if layout == "shared" else "-"])
            continue
        tokens_per_s = batch * s["beam"] * out_len / m["search_s"]
        first = m.get("first_search_s")  # (none in the records of before the kept graphs)
        cells += [f"{tokens_per_s:.0f}", number(m["step_s"] * 1e3), busy_cell(m), kind_shares(m.get("step_kernels")),
                  *bound_cells(m, run["peaks"]["bandwidth"]), gigabytes(m["reserved"]),
                  "-" if first is None else number(first)]
        if layout == "per beam":
            rows.append(cells + ["1.00x", "(before sharing)", "-"])
            continue
        if layout in ("shared, captured", "shared, fused"):
            rows.append(cells + captured_cells(m, by_key.get((out_len, batch, "shared")), batch, run))
            continue
        before = by_key.get((out_len, batch, "per beam"))
        if before is None or before["status"] != "ok":
            speedup, sharing = "-", verdict(True, run["device"]) + " (per beam OOM)"
        else:
            ratio = before["search_s"] / m["search_s"]
            speedup, sharing = f"{ratio:.2f}x", verdict(ratio >= SHARING_GOAL, run["device"])
        rows.append(cells + [speedup, goal, f"sharing: {sharing}; bound: {within_bound(m, run)}"])
    run, s = first_run(measurements, runs)
    bandwidth = run["peaks"]["bandwidth"]
    caption = (
        f"Row 4, decoding throughput: beam {s['beam']}, {s['pages']} pages of {s['page_len']} tokens, summaries of "
        f"exactly the given length, {run['dtype']}; pages shared by an example's beams vs one copy per beam (before "
        f"beam sharing), with the step loop; the shared layout with every step after the first replaying one "
        f"captured CUDA graph (on the CPU: the same fixed-shape steps, op by op); and (group 4:fused) the same step "
        f"compiled whole by inductor first, its kernels fused (the warm-up search pays the compilation). A captured "
        f"or fused search's speed-up is against the shared step loop, its ms/step the search less one encoder pass, "
        f"per step; its generator's first search (first search s) captures the step (and, fused, compiles it), "
        f"which the later searches of the same shapes replay. tokens/s = batch x beam x summary tokens / search s; ms/step: mean "
        f"interval between decoder calls; GPU busy ms/step: the step's kernels' own times (torch's profiler; on "
        f"the CPU, its operators'), what a step would take if the host launched nothing, and its split by kind of "
        f"kernel ({', '.join(kind for kind, _ in KERNEL_KINDS)} (inductor's), other); MB/step: 10^6 bytes one step "
        f"must read "
        f"(decoder weights, cross-attention keys and values, the self-attention cache at its mean length); bound = "
        f"MB/step / {peak_text(bandwidth, 'TB/s', 'bandwidth')}; peak reserved GB over the searches (\"-\" on the "
        f"CPU). Best of {s['repeats']} searches. Attention kernels in decoding: {measurements[0]['kernels']}."
    )
    header = ["summary tokens", "batch", "layout", "tokens/s", "ms/step", "GPU busy ms/step", KIND_HEADER, "MB/step",
              "bound ms",
              "step / bound", "peak reserved GB", "first search s", "speed-up", "goal", "verdict"]
    return [section(caption, header, rows)]
