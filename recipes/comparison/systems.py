"""The systems of the side-by-side comparison (``recipes/compare.sh``), read from its YAML.

A system is an experiment YAML of ``recipes/config/`` (its model, view, criterion, optimizer
and schedule) plus the comparison's own settings (``recipes/config/compare.yaml``): the same
updates, effective batch, summaries and initialization for every system, and an input length
that the fit stage chooses. This module turns (system, input length) into the Hydra overrides
that train it and the flags that decode it, and checks a list of systems against a corpus.

How a length reaches each view (``tokens`` is always a multiple of the fit unit):

* ``spatial``, ``token``        ``task.num_pages`` = tokens / unit pages of ``unit`` tokens;
* ``discourse``, ``document``   at most ``task.max_pages`` = tokens / unit pages of ``unit`` tokens;
* ``flat``, ``documents``       ``task.max_source_tokens`` = tokens, and the model's learned
                                positions as many (never fewer than the checkpoint's own);
* ``segments``                  ``task.max_document_tokens`` = tokens (AWESOME's truncation).

Decoding settings are the generation defaults' (``pagesum-decoding-flags``): this module only says
whether a system decodes whole documents or segment by segment. It imports OmegaConf (through the
one reader of experiment YAMLs, ``experiment_config.py``) and the plugin's torch-free owners of the
sizes and the file names, never torch or fairseq, so that the recipe's queries answer at once (``pagesum-compare-config COMPARE_YAML QUERY ...``, see
``main``).
"""

import argparse
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from omegaconf import DictConfig, OmegaConf

from pagesum_plugin.architectures import ARCHITECTURES
from pagesum_plugin.corpus.format import META_FILE

from ..experiment_config import load_experiment

PAGE_VIEWS = {"spatial": "num_pages", "token": "num_pages", "discourse": "max_pages", "document": "max_pages"}
SEQUENCE_VIEWS = ("flat", "documents")
CORPUS_KINDS = ("any", "sections", "clusters")
CLUSTER_DATASETS = ("multinews",)  # input formats whose groups are the documents of a cluster
CLUSTER_VIEWS = ("document", "documents")  # a corpus preprocessed with one of these is read as clusters
MODEL_SIZES = tuple(ARCHITECTURES)
# compare.yaml's awesome settings that are AWESOME's own options
AWESOME_OPTIONS = {"segmentation": "task", "max_input_tokens": "task", "memory_slots": "model"}


class ComparisonError(ValueError):
    """A setting or a choice of systems that cannot work, said in one line."""


@dataclass(frozen=True)
class System:
    key: str
    name: str  # as the report prints it
    config: str  # the experiment YAML (recipes/config/<config>.yaml)
    corpus: str = "any"  # "sections" or "clusters" where the system needs them
    max_tokens: Optional[int] = None  # the longest input it may read, whatever the budget
    extractor: Optional[str] = None  # AWESOME: the YAML of its salient-sentence extractor


class Comparison:
    """``compare.yaml`` with its ``dry_run`` section merged in when ``dry_run``."""

    def __init__(self, path: str | Path, dry_run: bool = False):
        self.path = Path(path)
        self.config_dir = self.path.parent
        raw = OmegaConf.load(self.path)
        settings = OmegaConf.merge(raw, raw.dry_run) if dry_run else raw
        self.init: str = settings.init
        self.reference: str = settings.reference
        self.significance: float = float(settings.significance)
        self.training: DictConfig = settings.training
        self.unit: int = int(settings.fit.unit)
        self.max_units: int = int(settings.fit.max_units)
        self.init_positions: int = int(settings.fit.init_positions)
        self.awesome: DictConfig = settings.awesome
        self.systems: Dict[str, System] = {}
        for key, entry in raw.systems.items():
            system = System(key=key, **OmegaConf.to_container(entry))
            if system.corpus not in CORPUS_KINDS:
                raise ComparisonError(f"{self.path}: system {key}: corpus must be one of {', '.join(CORPUS_KINDS)}")
            self.systems[key] = system
        if self.training.effective_batch % self.training.batch_size:
            raise ComparisonError(f"{self.path}: training.batch_size must divide training.effective_batch")

    # ---- systems and corpora ------------------------------------------------------------

    def system(self, key: str) -> System:
        if key not in self.systems:
            raise ComparisonError(f"unknown system '{key}'; choose from {' '.join(self.systems)}")
        return self.systems[key]

    def experiment(self, key: str) -> DictConfig:
        """The system's experiment YAML, as written."""
        return load_experiment(self.config_dir / f"{self.system(key).config}.yaml")

    def view(self, key: str) -> str:
        return self.experiment(key).task.view

    def select(self, meta: dict, requested: List[str]) -> List[str]:
        """The systems to compare on a corpus (its ``meta.json``): ``requested`` checked (one that
        needs sections or clusters the corpus does not have is an error), or every system the
        corpus can feed (``left_out`` names the others)."""
        kind = corpus_kind(meta)
        if not requested:
            return [key for key, s in self.systems.items() if s.corpus in ("any", kind)]
        for key in requested:
            system = self.system(key)
            if system.corpus not in ("any", kind):
                raise ComparisonError(f"{key} reads {system.corpus}, but this corpus holds {kind} "
                                      f"(dataset {meta.get('dataset')}, view {meta.get('view')})")
        if len(set(requested)) != len(requested):
            raise ComparisonError(f"a system is listed twice: {' '.join(requested)}")
        return list(requested)

    def left_out(self, meta: dict) -> List[str]:
        """The systems the corpus cannot feed, with the reason, for the recipe to say."""
        kind = corpus_kind(meta)
        return [f"{key} reads {s.corpus}, this corpus holds {kind}" for key, s in self.systems.items()
                if s.corpus not in ("any", kind)]

    def max_units_of(self, key: str) -> int:
        """The largest number of units the fit may try for a system."""
        cap = self.system(key).max_tokens
        return self.max_units if cap is None else max(1, min(self.max_units, cap // self.unit))

    # ---- training ------------------------------------------------------------------------

    def length_overrides(self, key: str, tokens: int) -> Dict[str, int]:
        """The task and model settings that make a system read ``tokens`` tokens."""
        if tokens <= 0 or tokens % self.unit:
            raise ComparisonError(f"an input length must be a positive multiple of {self.unit}, got {tokens}")
        view = self.view(key)
        if view in PAGE_VIEWS:
            return {f"task.{PAGE_VIEWS[view]}": tokens // self.unit, "task.max_page_tokens": self.unit}
        if view in SEQUENCE_VIEWS:
            return {"task.max_source_tokens": tokens, "model.max_source_positions": max(tokens, self.init_positions)}
        if view == "segments":
            return {"task.max_document_tokens": tokens}
        raise ComparisonError(f"{key}: no input length rule for the {view} view")

    def schedule_overrides(self, config: DictConfig) -> Dict[str, object]:
        """The same number of updates for every YAML: no epoch limit, a warm-up no longer than
        the run, and a decaying schedule that ends where the run does."""
        updates = int(self.training.updates)
        overrides: Dict[str, object] = {"optimization.max_update": updates, "optimization.max_epoch": 0}
        scheduler = config.get("lr_scheduler") or {}
        if scheduler.get("warmup_updates"):
            overrides["lr_scheduler.warmup_updates"] = min(int(scheduler.warmup_updates), updates)
        if "total_num_update" in scheduler:
            overrides["lr_scheduler.total_num_update"] = updates
        return overrides

    def training_overrides(self, key: str, tokens: int, model_size: Optional[str] = None) -> List[str]:
        """Hydra overrides of the system's YAML: the shared schedule and summaries, its length,
        AWESOME's input size, and the architecture at ``model_size``. Paths, devices and the
        batch split are the recipe's."""
        config = self.experiment(key)
        overrides = {**self.schedule_overrides(config), "task.max_summary_tokens": int(self.training.max_summary_tokens),
                     **self.length_overrides(key, tokens)}
        if config.task.view == "segments":
            overrides.update({f"{section}.{name}": self.awesome[name] for name, section in AWESOME_OPTIONS.items()
                              if name in self.awesome})
        if "data_workers" in self.training:
            overrides["dataset.num_workers"] = int(self.training.data_workers)
        if model_size:
            overrides["model._name"] = architecture(config.model._name, model_size)
        return [f"{name}={value}" for name, value in overrides.items()]

    def extractor_overrides(self, key: str, model_size: Optional[str] = None) -> List[str]:
        """AWESOME's extractor: trained like every system (the same updates)."""
        config = load_experiment(self.config_dir / f"{self.system(key).extractor}.yaml")
        overrides = self.schedule_overrides(config)
        if "data_workers" in self.training:
            overrides["dataset.num_workers"] = int(self.training.data_workers)
        if model_size:
            overrides["model._name"] = architecture(config.model._name, model_size)
        return [f"{name}={value}" for name, value in overrides.items()]

    def segmentation(self, key: str) -> str:
        """AWESOME's segmentation tag: its YAML's embedding model, or compare.yaml's choice."""
        return str(self.awesome.get("segmentation", self.experiment(key).task.segmentation))

    def update_freq(self, devices: int) -> int:
        """Forward passes per update that keep the effective batch on ``devices`` devices."""
        per_pass = devices * int(self.training.batch_size)
        if self.training.effective_batch % per_pass:
            raise ComparisonError(f"{devices} devices x batch {self.training.batch_size} must divide the "
                                  f"effective batch of {self.training.effective_batch} documents")
        return int(self.training.effective_batch) // per_pass

    # ---- decoding ------------------------------------------------------------------------

    def decoding(self, key: str) -> str:
        """How a system decodes: "segments" (one search per segment, with the per-segment
        lengths of the generation defaults) or "whole" (one search per document)."""
        return "segments" if self.view(key) == "segments" else "whole"

    def generate_flags(self, key: str, tokens: int) -> List[str]:
        """fairseq-generate flags of a system read at ``tokens``: its task, view and length. The
        search settings are the dataset's generation defaults (``pagesum-decoding-flags``)."""
        task = self.experiment(key).task
        flags = ["--task", task._name, "--max-summary-tokens", str(self.training.max_summary_tokens)]
        if task.view == "segments":
            flags += ["--segmentation", self.segmentation(key), "--salient-sentences", str(task.salient_sentences),
                      "--max-input-tokens", str(self.awesome.get("max_input_tokens", task.max_input_tokens))]
        else:
            flags += ["--view", task.view]
        for name, value in self.length_overrides(key, tokens).items():
            section, option = name.split(".")
            if section == "task":
                flags += ["--" + option.replace("_", "-"), str(value)]
        return flags

    def segment_flags(self) -> List[str]:
        """``pagesum-awesome-segment`` flags: Algorithm 1's segment lengths."""
        return ["--min-tokens", str(self.awesome.min_segment_tokens),
                "--max-tokens", str(self.awesome.max_segment_tokens)]


def corpus_kind(meta: dict) -> str:
    """"clusters" when the corpus's groups are the documents of a cluster (a Multi-News corpus,
    or one preprocessed with a document view); "sections" otherwise."""
    if meta.get("dataset") in CLUSTER_DATASETS or meta.get("view") in CLUSTER_VIEWS:
        return "clusters"
    return "sections"


def architecture(name: str, size: str) -> str:
    """An experiment's architecture at another size: ``hepos_bart_large`` at ``tiny`` is ``hepos_tiny``."""
    if size not in MODEL_SIZES:
        raise ComparisonError(f"MODEL_SIZE must be one of {', '.join(MODEL_SIZES)}, got '{size}'")
    if not name.endswith("_bart_large"):
        raise ComparisonError(f"architecture {name} is not named <model>_bart_large: no other size is known")
    return name[: -len("bart_large")] + size


# --------------------------------------------------------------------------- the recipe's queries


def read_meta(data: str | Path, plan: bool = False) -> dict:
    """The corpus's ``meta.json``; with ``plan`` ({} when the corpus is not written yet)."""
    path = Path(data) / META_FILE
    if plan and not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def fitted_tokens(comparison: Comparison, out_dir: Path, systems: List[str], plan: bool) -> Dict[str, int]:
    """Tokens each system reads, from the fit stage's ``OUT/<system>/fit.json`` (0: it does not
    fit the budget); with ``plan`` and no fit yet, the longest each may read."""
    tokens = {}
    for key in systems:
        path = out_dir / key / "fit.json"
        if not path.exists():
            if not plan:
                raise ComparisonError(f"{path} not found: run the fit stage")
            tokens[key] = comparison.max_units_of(key) * comparison.unit
            continue
        tokens[key] = json.loads(path.read_text(encoding="utf-8"))["tokens"] or 0
    return tokens


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pagesum-compare-config", description="What recipes/compare.sh asks of "
                                     "compare.yaml.")
    parser.add_argument("compare_yaml")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--model-size", choices=MODEL_SIZES, help="every system's architecture at this size")
    sub = parser.add_subparsers(dest="query", required=True)
    sub.add_parser("settings", help="the shared settings, as shell assignments").add_argument("devices", type=int)
    select = sub.add_parser("select", help="the systems to run on DATA: SYSTEM... checked, or every one that applies")
    select.add_argument("data")
    select.add_argument("systems", nargs="*")
    select.add_argument("--plan", action="store_true", help="a corpus not written yet: check names only")
    dataset = sub.add_parser("dataset", help="the corpus's dataset, whose generation defaults decode it")
    dataset.add_argument("data")
    dataset.add_argument("--plan", action="store_true", help="a corpus not written yet: 'default'")
    sub.add_parser("awesome", help="AWESOME's preparation: extractor YAML, segmentation, segment flags, "
                   "extractor overrides (tab-separated)").add_argument("system")
    plan = sub.add_parser("plan", help="per system (tab-separated): key, tokens, YAML, decoding (whole or "
                          "segments), training overrides, fairseq-generate flags")
    plan.add_argument("out_dir", type=Path, help="the comparison's outputs, with every system's fit.json")
    plan.add_argument("systems", nargs="+")
    plan.add_argument("--plan", action="store_true", help="no fit yet: the longest input each system may read")
    args = parser.parse_args(argv)
    try:
        comparison = Comparison(args.compare_yaml, dry_run=args.dry_run)
        print("\n".join(answer(comparison, args)))
    except (ComparisonError, OSError, json.JSONDecodeError) as err:
        print(f"compare: {err}", file=sys.stderr)
        return 2
    return 0


def answer(comparison: Comparison, args) -> List[str]:
    if args.query == "settings":
        values = {"DEFAULT_INIT": comparison.init, "DEFAULT_REFERENCE": comparison.reference,
                  "SIGNIFICANCE": comparison.significance, "BATCH": comparison.training.batch_size,
                  "UPDATE_FREQ": comparison.update_freq(max(args.devices, 1))}
        return [f"{name}={shlex.quote(str(value))}" for name, value in values.items()]
    if args.query == "select":
        meta = read_meta(args.data, args.plan)
        if not meta:  # PLAN=1 before the corpus exists: names are checked, not the corpus
            return [" ".join([comparison.system(key).key for key in args.systems] or list(comparison.systems))]
        if not args.systems:
            for reason in comparison.left_out(meta):
                print(f"compare: not compared: {reason}", file=sys.stderr)
        return [" ".join(comparison.select(meta, args.systems))]
    if args.query == "dataset":
        return [str(read_meta(args.data, args.plan).get("dataset", "default"))]
    if args.query == "awesome":
        system = comparison.system(args.system)
        return ["\t".join([system.extractor, comparison.segmentation(args.system),
                           " ".join(comparison.segment_flags()),
                           " ".join(comparison.extractor_overrides(args.system, args.model_size))])]
    tokens = fitted_tokens(comparison, args.out_dir, args.systems, args.plan)
    lines = []
    for key in args.systems:
        fits = tokens[key] > 0
        train = comparison.training_overrides(key, tokens[key], args.model_size) if fits else []
        generate = comparison.generate_flags(key, tokens[key]) if fits else []
        lines.append("\t".join([key, str(tokens[key]), comparison.system(key).config, comparison.decoding(key),
                                " ".join(train), " ".join(generate)]))
    return lines


if __name__ == "__main__":
    sys.exit(main())
