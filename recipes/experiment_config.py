"""Reads an experiment's YAML, the one source of its settings, for the shell recipes.

    python recipes/experiment_config.py CONFIG.yaml view-flags preprocess|generate
    python recipes/experiment_config.py CONFIG.yaml effective-batch
    python recipes/experiment_config.py CONFIG.yaml dry-run-overrides
    python recipes/experiment_config.py CONFIG.yaml settings-overrides NAME[,NAME...]
    python recipes/experiment_config.py CONFIG.yaml system [ARCH]

``view-flags`` turns the ``task:`` section's view settings into command-line flags (for
``pagesum-preprocess``, which records them as the corpus's default view, and for
``fairseq-generate``); ``effective-batch`` is documents per update on one device
(``dataset.batch_size`` x ``optimization.update_freq``); ``dry-run-overrides`` are the Hydra
overrides that shrink a run to toy size without changing its command line;
``settings-overrides`` are those of named alternatives in ``recipes/config/settings/``
(``fairseq``: fairseq's BART fine-tuning values; ``adafactor``: Adafactor for Adam;
``placeholder_pages``: the authors' "." pages). Every query answers for the YAML with the
settings named in ``$SETTINGS`` applied, so training and decoding see the same view.
"""

import os
import sys
from pathlib import Path

from omegaconf import OmegaConf

SETTINGS_DIR = Path(__file__).resolve().parent / "config" / "settings"

VIEW_KEYS = ("view", "num_pages", "max_pages", "max_page_tokens", "max_source_tokens", "spatial_split",
             "max_summary_tokens")
GENERATE_ONLY = ("placeholder_pages",)  # load-time options, not a corpus default
DRY_RUN_SIZES = {"max_page_tokens": 48, "max_source_tokens": 600, "max_summary_tokens": 32}


def view_flags(config, target: str) -> list:
    task = config.task
    keys = VIEW_KEYS + (GENERATE_ONLY if target == "generate" else ())
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


def main(path: str, what: str, *args: str) -> None:
    config = with_settings(OmegaConf.load(path), os.environ.get("SETTINGS", ""))
    if what == "view-flags":
        print(" ".join(view_flags(config, args[0])))
    elif what == "effective-batch":
        print(int(config.dataset.batch_size) * int(config.optimization.update_freq[0]))
    elif what == "dry-run-overrides":
        print(" ".join(dry_run_overrides(config)))
    elif what == "settings-overrides":
        print(" ".join(settings_overrides(args[0])))
    elif what == "system":
        print(((args[0] if args else "") or config.model._name).split("_")[0])
    else:
        sys.exit(f"unknown query {what!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
