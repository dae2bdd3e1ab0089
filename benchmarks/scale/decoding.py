"""Row 4: decoding throughput at bart.large scale. Beam search with each example's pages shared
by its beams against one copy per beam (the layout before beam sharing), and the step time
against the memory-bandwidth bound of the bytes a step must read."""

import argparse
import sys
from typing import Dict, List

from benchmarks.beam_cache import generator_for
from benchmarks.common import ModelSize, markdown_table
from benchmarks.scale import costs
from benchmarks.scale.group import Context, Group
from benchmarks.scale.kernels import AttentionKernels
from benchmarks.scale.search import (BANDWIDTH_GOAL, bound_cells, build_decoder_model, decoding_samples,
                                     decoding_settings, read_per_step, searched, timed_search, within_bound)
from benchmarks.scale.tables import gigabytes, not_run, number, verdict

SHARING_GOAL = 2.0


# ---- row 4: decoding throughput, beam sharing and the bandwidth bound -------------------------


def throughput_groups(args: argparse.Namespace) -> List[Group]:
    return [Group(f"4:{n}", "4", f"decoding throughput, {n}-token summaries", decoding_settings(args, out_len=n),
                  measure_throughput, throughput_cost) for n in args.out_lens]


def throughput_cost(s: Dict, size: ModelSize, element: int) -> costs.Cost:
    searches = costs.Cost()
    for batch in s["batches"]:
        for shared in (False, True):
            searches += costs.timed_searches(size, element, s["repeats"], s["out_len"], batch=batch, beam=s["beam"],
                                             pages=s["pages"], page_len=s["page_len"], shared=shared)
    return costs.start() + costs.build(size) + searches


def measure_throughput(s: Dict, ctx: Context) -> List[Dict]:
    dictionary, model = build_decoder_model(ctx.size, s["page_len"], s["out_len"] + 2, s["seed"], ctx)
    samples = decoding_samples(dictionary, s["batches"], s["pages"], s["page_len"], s["seed"], ctx.device)
    kernels = AttentionKernels(model)
    with kernels:
        generator_for(model, dictionary, s["beam"], 2, True).generate([model], samples[s["batches"][0]])
    records = []
    for batch, sample in samples.items():
        for layout, shared in (("per beam", False), ("shared", True)):
            def search():
                make = lambda n: generator_for(model, dictionary, s["beam"], n or s["out_len"], shared)  # noqa: E731
                return timed_search(make, model, sample, s["repeats"], ctx.device, forced=s["out_len"])

            record = searched(ctx, "4", layout, [s["out_len"], batch], search)
            record.update(out_len=s["out_len"], batch=batch, layout=layout, kernels=kernels.describe())
            if record["status"] == "ok":
                record["read"] = read_per_step(model, s, batch, record["calls"], shared)
            records.append(record)
            print(f"row 4: {s['out_len']} tokens, batch {batch}, {layout}: {record['status']}", file=sys.stderr,
                  flush=True)
    return records


def render_throughput(measurements: List[Dict], runs: Dict[str, Dict]) -> List[str]:
    if not measurements:
        return []
    goal = f"shared >= {SHARING_GOAL:.0f}x per beam; step <= {BANDWIDTH_GOAL}x bound"
    by_key = {(m["out_len"], m["batch"], m["layout"]): m for m in measurements}
    rows = []
    for (out_len, batch, layout), m in sorted(by_key.items(), key=lambda item: (item[0][0], item[0][1],
                                                                                 item[0][2] != "per beam")):
        run = runs[m["run"]]
        s = run["settings"]
        cells = [out_len, batch, layout]
        if m["status"] != "ok":
            rows.append(cells + [not_run(m)] * 7 + [goal if layout == "shared" else "(before sharing)",
                                                    verdict(False, run["device"]) if layout == "shared" else "-"])
            continue
        tokens_per_s = batch * s["beam"] * out_len / m["search_s"]
        cells += [f"{tokens_per_s:.0f}", number(m["step_s"] * 1e3), *bound_cells(m, run["peaks"]["bandwidth"]),
                  gigabytes(m["reserved"])]
        if layout == "per beam":
            rows.append(cells + ["1.00x", "(before sharing)", "-"])
            continue
        before = by_key.get((out_len, batch, "per beam"))
        if before is None or before["status"] != "ok":
            speedup, sharing = "-", verdict(True, run["device"]) + " (per beam OOM)"
        else:
            ratio = before["search_s"] / m["search_s"]
            speedup, sharing = f"{ratio:.2f}x", verdict(ratio >= SHARING_GOAL, run["device"])
        rows.append(cells + [speedup, goal, f"sharing: {sharing}; bound: {within_bound(m, run)}"])
    run = runs[measurements[0]["run"]]
    s, bandwidth = run["settings"], run["peaks"]["bandwidth"]
    caption = (
        f"Row 4, decoding throughput: beam {s['beam']}, {s['pages']} pages of {s['page_len']} tokens, summaries of "
        f"exactly the given length, {run['dtype']}; pages shared by an example's beams vs one copy per beam (before "
        f"beam sharing). tokens/s = batch x beam x summary tokens / search s; ms/step: mean interval between decoder "
        f"calls; MB/step: 10^6 bytes one step must read (decoder weights, cross-attention keys and values, the "
        f"self-attention cache at its mean length); bound = MB/step / "
        + (f"{number(bandwidth / 1e12)} TB/s" if bandwidth else "bandwidth (unknown here)")
        + f"; peak reserved GB over the searches (\"-\" on the CPU). Best of {s['repeats']} searches. Attention "
        f"kernels in decoding: {measurements[0]['kernels']}."
    )
    header = ["summary tokens", "batch", "layout", "tokens/s", "ms/step", "MB/step", "bound ms", "step / bound",
              "peak reserved GB", "speed-up", "goal", "verdict"]
    return [caption + "\n\n" + markdown_table(header, rows)]
