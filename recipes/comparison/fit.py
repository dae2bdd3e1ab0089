"""The fit stage of the comparison: every system's longest input within a memory budget.

    pagesum-compare-fit DATA --compare-config recipes/config/compare.yaml
        --systems pagesum_spatial [hepos_sinkhorn ...] --budget-mb 27648 --init-checkpoint BART/model.pt
        --out-dir OUT [--device cuda] [--fp16] [--model-size tiny] [--dry-run]

For each system, a bisection over input lengths (``bisection.py``: multiples of the
comparison's unit, up to its cap), started at the length the memory model predicts to fit
(``prediction.py``), in which every probe is one training step of the system at that length, as ``fairseq-hydra-train`` would run it with the comparison's overrides
(``training_step.py``), on this machine's device. The budget is in MB (2^20 bytes) of tensor
memory: ``torch.cuda.max_memory_allocated`` on a GPU, torch's MemTracker on CPU.

Writes ``OUT/<system>/fit.json`` per system (moved into place when complete): the tokens it
reads (null when not one unit fits), the tokens the memory model predicted, the peak memory and speed of its training step at that
length, every probe, and the budget and device they were measured on. Systems are fitted one
after another; the recipe deals them over several processes when it may run several at once.
"""

import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Dict, List

import torch

from pagesum_plugin.atomic import write_atomically
from pagesum_plugin.checkpoints.builder import PLUGIN_DIR
from pagesum_recipes.profiling import describe_device

from ..arguments import FIT as PROG, fit_parser
from .bisection import longest_within
from .prediction import predicted_units
from .systems import Comparison, ComparisonError
from .training_step import StepCost, step_cost

MB = 2**20
logger = logging.getLogger("pagesum_recipes.comparison.fit")


def machine_overrides(args) -> List[str]:
    """What the recipe's train stage adds to every system's overrides besides the batch split."""
    device = ["common.cpu=true", "common.fp16=false"] if args.device == "cpu" else [f"common.fp16={str(args.fp16).lower()}"]
    return [f"common.user_dir={PLUGIN_DIR}", f"task.data={Path(args.data).resolve()}",
            f"checkpoint.finetune_from_model={Path(args.init_checkpoint).resolve()}", *device]


def fit_system(comparison: Comparison, key: str, args, budget_bytes: float) -> Dict:
    """The fit of one system, as ``fit.json`` records it."""
    system = comparison.system(key)
    base = [*machine_overrides(args), f"dataset.batch_size={comparison.training.batch_size}"]

    def measure(tokens: int) -> StepCost:
        overrides = base + comparison.training_overrides(key, tokens, args.model_size)
        return step_cost(comparison.config_dir, system.config, overrides)

    dtype = "fp16" if args.device == "cuda" and args.fp16 else "fp32"
    start = predicted_units(comparison, key, args.data, budget_bytes, args.model_size, dtype)
    fit = longest_within(measure, budget_bytes, comparison.unit, comparison.max_units_of(key), start_units=start)
    best = fit.measurement
    return {
        "system": key,
        "name": system.name,
        "config": system.config,
        "device": describe_device(args.device),
        "budget_mb": args.budget_mb,
        "unit": comparison.unit,
        "batch_size": int(comparison.training.batch_size),
        "model_size": args.model_size or "as the YAMLs",
        "dry_run": args.dry_run,
        "tokens": fit.tokens,
        "predicted_tokens": start * comparison.unit if start else None,
        "peak_mb": best.peak_bytes / MB if best else None,
        "step_seconds": best.seconds if best else None,
        "train_tokens_per_second": best.tokens_per_second if best else None,
        "overrides": comparison.training_overrides(key, fit.tokens, args.model_size) if fit.tokens else None,
        "consistent": fit.consistent,
        "probes": [{"tokens": tokens, "peak_mb": m.peak_bytes / MB if math.isfinite(m.peak_bytes) else None,
                    "fits": fit.fits(m), "seconds": m.seconds if math.isfinite(m.seconds) else None,
                    "source_tokens": m.source_tokens} for tokens, m in fit.probes],
    }


def main(argv=None) -> int:
    args = fit_parser().parse_args(argv)
    logging.basicConfig(format="%(asctime)s %(name)s %(message)s", level=logging.INFO, stream=sys.stdout)
    logging.getLogger("fairseq").setLevel(logging.WARNING)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"{PROG}: error: --device cuda, but no CUDA device is visible to torch", file=sys.stderr)
        return 2
    if args.budget_mb <= 0:
        print(f"{PROG}: error: --budget-mb must be positive", file=sys.stderr)
        return 2
    try:
        comparison = Comparison(args.compare_config, dry_run=args.dry_run)
        for key in args.systems:
            comparison.system(key)
    except ComparisonError as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    for key in args.systems:
        start = time.perf_counter()
        result = fit_system(comparison, key, args, args.budget_mb * MB)
        result["seconds"] = time.perf_counter() - start
        said = (f"{result['tokens']} tokens, {result['peak_mb']:.1f} MB" if result["tokens"]
                else f"does not fit: {result['probes'][0]['tokens']} tokens need more")
        logger.info(f"{key}: {said} ({len(result['probes'])} training steps measured)")
        (args.out_dir / key).mkdir(parents=True, exist_ok=True)
        write_atomically(args.out_dir / key / "fit.json", json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
