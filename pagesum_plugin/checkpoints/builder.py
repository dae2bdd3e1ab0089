"""The one way a model or a checkpoint is built: through fairseq's own parser.

``pagesum-convert``, the benchmarks and the tests all call ``build_model``; dimensions come
only from fairseq's registered architectures (``bart_large_architecture`` and the plugin's
own), overridden by explicit flags, never restated here.
"""

import os
from pathlib import Path
from typing import Optional, Sequence

import torch
from fairseq import options, tasks
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from omegaconf import OmegaConf

from ..atomic import atomic_path
from ..corpus.format import DICT_FILE, CorpusMeta

# The package's folder as Python imported it (not resolved: fairseq's --user-dir refuses a
# second path to a package already imported, and an install may link the folder).
PLUGIN_DIR = str(Path(__file__).parents[1])


def dictionary_directory(dictionary: Dictionary, directory: str | Path) -> str:
    """A data directory holding only a dictionary: enough for the task to build a model."""
    os.makedirs(directory, exist_ok=True)
    with atomic_path(os.path.join(directory, DICT_FILE)) as partial:
        dictionary.save(str(partial))
    CorpusMeta(tokenizer="none", dictionary_size=len(dictionary)).save(directory)
    return str(directory)


def build_model(data_dir: str | Path, arch: str, *flags: str, task: str = "paged_summarization",
                settings: Optional[dict] = None):
    """(args, task, model) for architecture ``arch`` over the data directory ``data_dir``, with
    fairseq command-line ``flags``; the weights are freshly initialised. ``settings`` are model
    arguments set over the architecture's defaults, for those no flag can set (BART's
    architectures fix ``no_scale_embedding`` at True, and its flag can only set True)."""
    argv = [str(data_dir), "--user-dir", PLUGIN_DIR, "--task", task, "--arch", arch, *flags]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    for name, value in (settings or {}).items():
        setattr(args, name, value)
    fairseq_task = tasks.setup_task(args)
    return args, fairseq_task, fairseq_task.build_model(args)


def checkpoint_state(args, model: torch.nn.Module) -> dict:
    """A fairseq checkpoint: the configuration as fairseq-train writes it, and the weights."""
    args.user_dir = None  # the plugin is found by --user-dir at load time, not by a path stored here
    cfg = convert_namespace_to_omegaconf(args)
    return {
        "args": None,
        "cfg": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
        "model": {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()},
        "optimizer_history": [{"criterion_name": "none", "optimizer_name": "none",
                               "lr_scheduler_state": {}, "num_updates": 0}],
        "extra_state": {},
    }


def save_checkpoint(path: str | Path, args, model: torch.nn.Module) -> None:
    with atomic_path(path) as partial:
        torch.save(checkpoint_state(args, model), str(partial))


def flags_of(pairs: Sequence[tuple]) -> list:
    """``[("encoder-layers", 2), ...]`` -> ``["--encoder-layers", "2", ...]``."""
    return [arg for name, value in pairs for arg in (f"--{name}", str(value))]
