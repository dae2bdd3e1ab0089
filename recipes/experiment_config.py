"""Reads an experiment's YAML, the one source of its settings: the one reader of
``recipes/config/<experiment>.yaml``, for the shell recipes and the comparison alike.

    pagesum-experiment CONFIG.yaml view-flags preprocess|generate
    pagesum-experiment CONFIG.yaml task-flags KEY [KEY ...]
    pagesum-experiment CONFIG.yaml value KEY
    pagesum-experiment CONFIG.yaml batch-size | effective-batch
    pagesum-experiment CONFIG.yaml dry-run-overrides | dry-run-flags
    pagesum-experiment CONFIG.yaml settings-overrides NAME[,NAME...]
    pagesum-experiment CONFIG.yaml system [ARCH]

``view-flags`` turns the ``task:`` section's view settings into command-line flags (for
``pagesum-preprocess``, which records them as the corpus's default view, and for
``fairseq-generate``); ``task-flags`` does so for the ``task:`` settings named; ``value`` prints
one setting (``task.segmentation``); ``batch-size`` is documents per forward pass
(``dataset.batch_size``) and ``effective-batch`` documents per update on one device
(``dataset.batch_size`` x ``optimization.update_freq``); ``dry-run-overrides`` are the Hydra
overrides that shrink a run to toy size without changing its command line, and
``dry-run-flags`` the same sizes as ``fairseq-generate`` flags;
``settings-overrides`` are those of named alternatives in ``recipes/config/settings/``
(``fairseq``: fairseq's BART fine-tuning values; ``adafactor``: Adafactor for Adam;
``placeholder_pages``: the authors' "." pages); ``system`` is the registered model that
``ARCH`` (or the YAML's architecture) belongs to, whose decoding defaults apply. Every query answers for the YAML with the
settings named in ``$SETTINGS`` applied, so training and decoding see the same view.
"""

import argparse
import os
import sys
from pathlib import Path
from typing import List, Sequence

from omegaconf import OmegaConf

SETTINGS_DIR = Path(__file__).resolve().parent / "config" / "settings"

VIEW_KEYS = ("view", "num_pages", "max_pages", "max_page_tokens", "max_source_tokens", "spatial_split",
             "max_summary_tokens")
GENERATE_ONLY = ("placeholder_pages",)  # load-time options, not a corpus default
DRY_RUN_SIZES = {"max_page_tokens": 48, "max_source_tokens": 600, "max_summary_tokens": 32}


def task_flags(config, keys: Sequence[str]) -> List[str]:
    """The ``task:`` settings ``keys`` that the YAML sets, as command-line flags (a true
    boolean is a bare flag, a false one none)."""
    task = config.task
    flags = []
    for key in keys:
        if key not in task or task[key] is None:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(task[key], bool):
            flags += [flag] if task[key] else []
        else:
            flags += [flag, str(task[key])]
    return flags


def view_flags(config, target: str) -> List[str]:
    return task_flags(config, VIEW_KEYS + (GENERATE_ONLY if target == "generate" else ()))


def dry_run_overrides(config) -> list:
    overrides = ["optimization.max_update=2", "optimization.max_epoch=2"]
    warmup = config.get("lr_scheduler", {}).get("warmup_updates")
    if warmup:  # shortened, never added: a schedule without warmup keeps none
        overrides.append(f"lr_scheduler.warmup_updates={min(int(warmup), 2)}")
    # only the sizes the experiment sets: Hydra refuses a key the YAML does not hold
    overrides += [f"task.{key}={value}" for key, value in DRY_RUN_SIZES.items() if key in config.task]
    return overrides


def settings_overrides(names: str) -> list:
    overrides = []
    for name in filter(None, names.split(",")):
        path = SETTINGS_DIR / f"{name}.yaml"
        if not path.exists():
            known = ", ".join(sorted(p.stem for p in SETTINGS_DIR.glob("*.yaml")))
            sys.exit(f"SETTINGS: no settings named {name!r} (known: {known})")
        overrides += OmegaConf.to_container(OmegaConf.load(path), resolve=False)["overrides"]  # kept as written: ${...} is for Hydra
    return overrides


def with_settings(config, names: str):
    """The experiment's settings as the run sees them: the YAML with the named settings'
    value overrides applied (``~key`` deletions only touch the optimizer's own keys)."""
    values = [o.lstrip("+") for o in settings_overrides(names) if not o.startswith("~") and "${" not in o]
    return OmegaConf.merge(config, OmegaConf.from_dotlist(values)) if values else config


def load_experiment(path: str | Path, settings: str = ""):
    """The experiment's YAML with the named ``settings`` (comma-separated) applied."""
    return with_settings(OmegaConf.load(path), settings)


def answer(config, query: str, args: List[str]) -> str:
    if query == "view-flags":
        return " ".join(view_flags(config, args[0]))
    if query == "task-flags":
        return " ".join(task_flags(config, args))
    if query == "value":
        return str(OmegaConf.select(config, args[0]))
    if query == "batch-size":
        return str(int(config.dataset.batch_size))
    if query == "effective-batch":
        return str(int(config.dataset.batch_size) * int(config.optimization.update_freq[0]))
    if query == "dry-run-overrides":
        return " ".join(dry_run_overrides(config))
    if query == "dry-run-flags":
        return " ".join(f"--{key.replace('_', '-')} {value}" for key, value in DRY_RUN_SIZES.items())
    if query == "settings-overrides":
        return " ".join(settings_overrides(args[0]))
    if query == "system":  # the registered model that ARCH (or the YAML's architecture) belongs to
        return ((args[0] if args else "") or config.model._name).split("_")[0]
    raise SystemExit(f"pagesum-experiment: unknown query {query!r}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pagesum-experiment", description=__doc__.split("\n")[0])
    parser.add_argument("config", help="the experiment's YAML (recipes/config/<experiment>.yaml)")
    parser.add_argument("query", choices=("view-flags", "task-flags", "value", "batch-size", "effective-batch",
                                          "dry-run-overrides", "dry-run-flags", "settings-overrides",
                                          "system"))
    parser.add_argument("args", nargs="*", help="the query's arguments")
    args = parser.parse_args(argv)
    print(answer(load_experiment(args.config, os.environ.get("SETTINGS", "")), args.query, args.args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
