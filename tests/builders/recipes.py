"""What the recipes' dry runs share: real papers cut into splits, a ``$BART_DIR`` in which one
tiny BART stands in for each initialisation, and running a recipe as a user would.

``$BART_DIR`` is laid out as the recipes expect: ``encoder.json`` and ``vocab.bpe`` (a
byte-level BPE trained on the papers) and ``{init}/{model.pt,dict.txt}`` per initialisation,
the model in fairseq's checkpoint format with 1,024 source positions.
"""

import os
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from builders.bpe import Gpt2BpeFiles, build_gpt2_bpe
from builders.cli import REPO_ROOT, subprocess_env
from builders.corpora import acl_papers
from builders.models import bart_twin, build_tiny, save_bart_checkpoint
from pagesum_plugin.corpus.format import CorpusMeta

SPLITS = ("train", "valid", "test")


def split_papers(n_train: int, n_valid: int, n_test: int, offset: int = 0,
                 sections: Optional[int] = None) -> dict[str, list[dict]]:
    """``{"train", "valid", "test"}``: consecutive real papers, ``offset`` papers in; with
    ``sections``, each paper cut to its first ``sections`` sections."""
    papers = acl_papers(n_train + n_valid + n_test, offset=offset)
    if sections is not None:
        papers = [dict(paper, sections=paper["sections"][:sections]) for paper in papers]
    return {"train": papers[:n_train], "valid": papers[n_train:n_train + n_valid], "test": papers[n_train + n_valid:]}


def write_bart_dir(root: Path, papers: dict[str, list[dict]], inits=("bart.large",)) -> Gpt2BpeFiles:
    """Fill ``root`` as ``$BART_DIR``; returns its BPE files (for preprocessing by hand)."""
    rows = [paper for split in papers.values() for paper in split]
    texts = [p["summary"] for p in rows] + [s["text"] for p in rows for s in p["sections"]]
    bpe = build_gpt2_bpe(root, texts, vocab_size=600)
    dict_only = root / "dict_only"
    dict_only.mkdir()
    shutil.copyfile(bpe.dict_txt, dict_only / "dict.txt")
    CorpusMeta(tokenizer="none").save(dict_only)  # the task needs a data directory; only the dictionary matters
    bart = bart_twin(*build_tiny(str(dict_only)))
    for init in inits:
        (root / init).mkdir()
        shutil.copyfile(bpe.dict_txt, root / init / "dict.txt")
        save_bart_checkpoint(str(root / init / "model.pt"), bart)
    return bpe


def recipe_env(**variables: str) -> dict[str, str]:
    """The environment of a recipe run on this machine: the project's commands first on the
    path and, unless ``variables`` say otherwise, no GPU, one worker and one thread (runs go
    two at a time on two cores)."""
    env = subprocess_env(NUM_GPUS="0", WORKERS="1", GEN_BATCH_SIZE="2", OMP_NUM_THREADS="1")
    env.update(variables)
    return env


def run_recipe(script: str, env: dict[str, str], timeout: int = 900) -> str | None:
    """Run ``recipes/{script}``; returns None, or why it failed with its output's tail."""
    result = subprocess.run(["bash", os.path.join(REPO_ROOT, "recipes", script)], env=env,
                            capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        return f"recipes/{script} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return None


def finished(dry_runs: dict[str, tuple[Path, str | None]], name: str) -> Path:
    """The output directory of dry run ``name``, failing the test with its output if it failed."""
    out_dir, failure = dry_runs[name]
    if failure:
        raise AssertionError(failure)
    return out_dir
