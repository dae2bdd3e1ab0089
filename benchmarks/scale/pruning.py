"""Row 5: page pruning at bart.large scale. Decoding only the ``--top-pages`` most confident
pages (the generator's ``top_pages``, its scoring pass timed with it) against all pages, and
the fidelity table of ``generation_speed``, which runs at its own size."""

import argparse
from typing import Dict, List

from benchmarks.beam_cache import generator_for
from benchmarks.common import CPU_TINY, ModelSize
from benchmarks.generation_speed import FIDELITY_TASK, fidelity_rows
from benchmarks.scale import costs
from benchmarks.scale.group import Context, Group
from benchmarks.scale.search import Variant, decoding_settings, measure_searches
from benchmarks.scale.tables import gigabytes, keyed, not_run, section, verdict

PRUNING_GOAL = 3.0
DECODINGS = {False: "step loop", True: "captured"}  # how a search's steps run


def pruning_groups(args: argparse.Namespace) -> List[Group]:
    groups = [Group(f"5:{n}", "5", f"page pruning, {n}-token summaries",
                    decoding_settings(args, out_len=n, top_pages=args.top_pages), measure_pruning, pruning_cost)
              for n in args.out_lens]
    fidelity = dict(beam=args.beam, train_updates=args.train_updates, fidelity_docs=args.fidelity_docs, seed=args.seed,
                    pages=args.decode_pages, page_len=args.page_len)
    return groups + [Group("5:fidelity", "5", "fidelity of page pruning", fidelity, measure_fidelity, fidelity_cost)]


def pruning_cost(s: Dict, size: ModelSize, element: int) -> costs.Cost:
    searches = costs.Cost()
    for batch in s["batches"]:
        for captured in (False, True):
            shape = dict(batch=batch, beam=s["beam"], page_len=s["page_len"], captured=captured)
            scoring = costs.beam_search(size, element, steps=1, pages=s["pages"], **shape)
            searches += costs.timed_searches(size, element, s["repeats"], s["out_len"], pages=s["pages"], **shape)
            searches += costs.timed_searches(size, element, s["repeats"], s["out_len"], pages=s["top_pages"], **shape)
            searches += scoring.times(s["repeats"] + 1)
    return costs.start() + costs.build(size) + searches


def measure_pruning(s: Dict, ctx: Context) -> List[Dict]:
    fixed = "graph" if ctx.device.type == "cuda" else "static"  # the CPU runs the fixed-shape steps op by op

    def kept(top_pages: int, captured: bool) -> Variant:
        def make(model, dictionary, n):
            return generator_for(model, dictionary, s["beam"], n or s["out_len"], True, top_pages=top_pages,
                                 decoding=fixed if captured else "eager")
        decoding = DECODINGS[captured]
        fields = {"out_len": s["out_len"], "top_pages": top_pages, "decoding": decoding}
        name = f"top {top_pages}" if top_pages else "all pages"
        return Variant(f"{name}, {decoding}", fields, make, shared=None, captured=captured)

    variants = [kept(top, captured) for captured in (False, True) for top in (0, s["top_pages"])]
    return measure_searches(s, ctx, "5", s["out_len"], variants, forced=s["out_len"])


def render_pruning(measurements: List[Dict], runs: Dict[str, Dict]) -> List[str]:
    speed = [m for m in measurements if m["system"] != "fidelity"]
    fidelity = [m for m in measurements if m["system"] == "fidelity"]
    return render_speed(speed, runs) + render_fidelity(fidelity, runs)


def render_speed(measurements: List[Dict], runs: Dict[str, Dict]) -> List[str]:
    if not measurements:
        return []
    goal = f">= {PRUNING_GOAL:.0f}x all pages"
    for m in measurements:  # the first GPU visit's records ran only the step loop
        m.setdefault("decoding", DECODINGS[False])
    by_key = keyed(measurements, ("out_len", "batch", "decoding", "top_pages"),
                   lambda key: (key[0], key[1], key[2] != DECODINGS[False], key[3]))
    rows = []
    for (out_len, batch, decoding, top_pages), m in by_key.items():
        run = runs[m["run"]]
        s = run["settings"]
        cells = [out_len, batch, decoding, f"{top_pages} of {s['pages']}" if top_pages else "all"]
        if m["status"] != "ok":
            rows.append(cells + [not_run(m)] * 3 + ["-", goal, "-" if not top_pages else "n/a (did not run)"])
            continue
        cells += [f"{batch / m['search_s']:.2f}", f"{batch * s['beam'] * out_len / m['search_s']:.0f}",
                  gigabytes(m["reserved"])]
        full = by_key.get((out_len, batch, decoding, 0))
        if not top_pages:
            rows.append(cells + ["1.00x", goal, "-"])
        elif full is None or full["status"] != "ok":
            rows.append(cells + ["-", goal, "n/a (all pages did not run)"])
        else:
            speedup = full["search_s"] / m["search_s"]
            rows.append(cells + [f"{speedup:.2f}x", goal, verdict(speedup >= PRUNING_GOAL, run["device"])])
    run = runs[measurements[0]["run"]]
    s = run["settings"]
    caption = (
        f"Row 5, page pruning: beam {s['beam']}, {s['pages']} pages of {s['page_len']} tokens, summaries of exactly "
        f"the given length, {run['dtype']}, the {s['top_pages']} most confident pages (scoring pass included) against "
        f"all, pages shared by the beams, best of {s['repeats']} searches, with the step loop and with every step "
        f"after the first replaying one captured CUDA graph (on the CPU: the same fixed-shape steps, op by op); "
        f"peak reserved GB over the searches (\"-\" on the CPU)."
    )
    header = ["summary tokens", "batch", "steps", "pages decoded", "summaries/s", "decoder tokens/s", "peak reserved GB",
              "speed-up", "goal", "verdict"]
    return [section(caption, header, rows)]


# ---- fidelity ---------------------------------------------------------------------------------


def fidelity_cost(s: Dict, size: ModelSize, element: int) -> costs.Cost:
    """pagesum_tiny trained on the salient-page task (summaries from 1 and from 2 pages), then
    full decoding and decoding 1, 2, 3 of its 4 pages, of every held-out document at once."""
    shape = dict(batch=32, pages=FIDELITY_TASK["n_pages"], page_len=FIDELITY_TASK["page_len"],
                 tgt_len=FIDELITY_TASK["summary_len"] + 2)
    training = costs.training_pass(CPU_TINY, **shape).times(s["train_updates"])
    decoding = costs.beam_search(CPU_TINY, 4, s["fidelity_docs"], s["beam"], FIDELITY_TASK["n_pages"],
                                 FIDELITY_TASK["page_len"], FIDELITY_TASK["summary_len"] + 2)
    return costs.start() + (training + decoding.times(FIDELITY_TASK["n_pages"])).times(2)


def measure_fidelity(s: Dict, ctx: Context) -> List[Dict]:
    settings = argparse.Namespace(seed=s["seed"], beams=[s["beam"]], train_updates=s["train_updates"],
                                  fidelity_docs=s["fidelity_docs"])
    caption, rows = fidelity_rows(settings, ctx.device)
    return [{"system": "fidelity", "point": [], "status": "ok", "caption": caption, "cells": row} for row in rows]


def render_fidelity(measurements: List[Dict], runs: Dict[str, Dict]) -> List[str]:
    if not measurements:
        return []
    s = runs[measurements[0]["run"]]["settings"]
    own_size = f"{FIDELITY_TASK['n_pages']} pages x {FIDELITY_TASK['page_len']} tokens"
    goal = f"fidelity at {s['pages']} x {s['page_len']}"
    rows = [m["cells"] + [goal, f"not met: pagesum_tiny on {own_size}"] for m in measurements]
    header = ["summary drawn from pages", "full decoding = reference", "beam", "pages kept", "pruned differs", "goal",
              "verdict"]
    caption = measurements[0]["caption"]
    caption = (f"Row 5, {caption[0].lower()}{caption[1:]} Run at generation_speed's own size, not at "
               f"{s['pages']} x {s['page_len']}: random weights have no page preference to keep.")
    return [section(caption, header, rows)]
