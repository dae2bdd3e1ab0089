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

VARIANTS = ("production", "no blocking")  # the second: the same search with --no-repeat-ngram-size 0


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
                page_len=s["page_len"], extra_ops=costs.BLOCKER_OPS if variant == "production" else 0)
    return costs.start() + costs.build(size) + searches


def measure_production(s: Dict, ctx: Context) -> List[Dict]:
    def search(variant: str) -> Variant:
        ngram = s["ngram"] if variant == "production" else 0

        def make(model, dictionary, n):  # n = 2: the warm-up, summaries of exactly two tokens
            return generator_for(model, dictionary, s["beam"], n or s["max_len"], True,
                                 min_len=n or s["min_len"], len_penalty=s["lenpen"], no_repeat_ngram_size=ngram)
        return Variant(f"{s['dataset']} {variant}", {"dataset": s["dataset"], "variant": variant}, make)

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
        f"{s['page_len']} tokens, {run['dtype']}, pages shared by the beams, against the same search without n-gram "
        f"blocking. Summary tokens: mean length decoded (random weights rarely choose </s>); ms/step: mean interval "
        f"between decoder calls; blocking: step time with the blocker / without; bound = MB/step / "
        f"{peak_text(run['peaks']['bandwidth'], 'TB/s', 'bandwidth')}. Best of {s['repeats']} searches."
    )
    header = ["dataset", "lenpen / n-gram / lengths", "batch", "search", "summary tokens", "summaries/s", "ms/step",
              "MB/step", "bound ms", "step / bound", "peak reserved GB", "blocking", "goal", "verdict"]
    return [section(caption, header, rows)]
