"""Row 6: decoding with a dataset's production settings (``pagesum_plugin.generation.defaults``:
beam, length penalty, trigram blocking, minimum and maximum summary length), at bart.large
scale, against the same search without the n-gram blocker, and against the bound of the bytes
a step must read. Random weights rarely choose </s>, so the summaries run to about the
maximum length; the table gives the mean length decoded."""

import argparse
from typing import Dict, List

from benchmarks.beam_cache import generator_for
from benchmarks.common import ModelSize
from benchmarks.scale import costs
from benchmarks.scale.group import Context, Group
from benchmarks.scale.search import (BANDWIDTH_GOAL, Variant, bound_cells, decoding_settings, measure_searches,
                                     within_bound)
from benchmarks.scale.tables import gigabytes, first_run, keyed, not_run, number, peak_text, section
from pagesum_plugin.generation.defaults import for_dataset

# production: the dataset's settings with the step loop; no blocking: the same, --no-repeat-ngram-size 0;
# captured: the dataset's settings, every step after the first replaying one captured CUDA graph (the
# default on CUDA; on the CPU the same fixed-shape steps, op by op)
VARIANTS = ("production", "no blocking", "captured")


def production_groups(args: argparse.Namespace) -> List[Group]:
    groups = []
    for dataset in args.production_datasets:
        defaults = for_dataset(dataset)
        cap = args.production_len_cap or defaults.max_len_b
        settings = decoding_settings(args, dataset=dataset, lenpen=defaults.lenpen,
                                     ngram=defaults.no_repeat_ngram_size, min_len=min(defaults.min_len, cap),
                                     max_len=min(defaults.max_len_b, cap))
        settings["beam"] = defaults.beam
        groups.append(Group(f"6:{dataset}", "6", f"production decoding, {dataset} settings", settings,
                            measure_production, production_cost))
    return groups


def production_cost(s: Dict, size: ModelSize, element: int) -> costs.Cost:
    searches = costs.Cost()
    for batch in s["batches"]:
        for variant in VARIANTS:
            searches += costs.timed_searches(
                size, element, s["repeats"], s["max_len"], batch=batch, beam=s["beam"], pages=s["pages"],
                page_len=s["page_len"], extra_ops=costs.BLOCKER_OPS if variant == "production" else 0,
                captured=variant == "captured")
    return costs.start() + costs.build(size) + searches


def measure_production(s: Dict, ctx: Context) -> List[Dict]:
    fixed = "graph" if ctx.device.type == "cuda" else "static"

    def search(variant: str) -> Variant:
        ngram = 0 if variant == "no blocking" else s["ngram"]
        captured = variant == "captured"

        def make(model, dictionary, n):  # n = 2: the warm-up, summaries of exactly two tokens
            return generator_for(model, dictionary, s["beam"], n or s["max_len"], True,
                                 min_len=n or s["min_len"], len_penalty=s["lenpen"], no_repeat_ngram_size=ngram,
                                 decoding=fixed if captured else "eager")
        return Variant(f"{s['dataset']} {variant}", {"dataset": s["dataset"], "variant": variant}, make,
                       captured=captured)

    return measure_searches(s, ctx, "6", s["max_len"], [search(variant) for variant in VARIANTS])


def render_production(measurements: List[Dict], runs: Dict[str, Dict]) -> List[str]:
    if not measurements:
        return []
    goal = f"production step <= {BANDWIDTH_GOAL}x bound"
    by_key = keyed(measurements, ("dataset", "batch", "variant"), lambda key: (*key[:2], VARIANTS.index(key[2])))
    rows = []
    for (dataset, batch, variant), m in by_key.items():
        run = runs[m["run"]]
        s = run["settings"]
        cells = [dataset, f"{s['lenpen']:g} / {s['ngram']} / {s['min_len']}-{s['max_len']}", batch, variant]
        if m["status"] != "ok":
            rows.append(cells + [not_run(m)] * 8 + [goal, "-"])
            continue
        cells += [number(m["length"]), f"{batch / m['search_s']:.3g}", number(m["step_s"] * 1e3),
                  *bound_cells(m, run["peaks"]["bandwidth"]), gigabytes(m["reserved"])]
        if variant == "captured":
            loop = by_key.get((dataset, batch, "production"))
            speedup = "-" if loop is None or loop["status"] != "ok" else f"{loop['search_s'] / m['search_s']:.2f}x"
            rows.append(cells + [f"{speedup} faster", goal, within_bound(m, run)])
            continue
        if variant != "production":
            rows.append(cells + ["-", "(reference)", "-"])
            continue
        plain = by_key.get((dataset, batch, "no blocking"))
        cost = "-" if plain is None or plain["status"] != "ok" else f"{m['step_s'] / plain['step_s']:.2f}x"
        rows.append(cells + [cost, goal, within_bound(m, run)])
    run, s = first_run(measurements, runs)
    caption = (
        f"Row 6, production decoding: each dataset's generation defaults (pagesum_plugin.generation.defaults: length "
        f"penalty / no-repeat n-gram size / min-max summary tokens), beam {s['beam']}, {s['pages']} pages of "
        f"{s['page_len']} tokens, {run['dtype']}, pages shared by the beams, with the step loop, against the same search "
        f"without n-gram blocking, and with every step after the first replaying one captured CUDA graph (on the CPU: "
        f"the same fixed-shape steps, op by op; its blocking column: its speed-up over the step loop). Summary tokens: mean length decoded (random weights rarely choose </s>); ms/step: mean interval "
        f"between decoder calls; blocking: step time with the blocker / without; bound = MB/step / "
        f"{peak_text(run['peaks']['bandwidth'], 'TB/s', 'bandwidth')}. Best of {s['repeats']} searches."
    )
    header = ["dataset", "lenpen / n-gram / lengths", "batch", "search", "summary tokens", "summaries/s", "ms/step",
              "MB/step", "bound ms", "step / bound", "peak reserved GB", "blocking", "goal", "verdict"]
    return [section(caption, header, rows)]
