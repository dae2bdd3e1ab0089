"""What one training step of an experiment costs: its peak memory and its time.

The experiment's YAML and Hydra overrides are composed exactly as ``fairseq-hydra-train``
composes them (fairseq's schema, then ``add_defaults``); the task, model, criterion and
fairseq's ``Trainer`` are built from that configuration, and the step is the trainer's own
(forward, backward and the optimizer's update, with the configuration's precision and
clipping) on the costliest batch of the training split: the ``dataset.batch_size`` examples
that the task's dataset counts the most tokens for under the experiment's view. Weights are
not loaded: memory and time do not depend on their values.

A first step builds the optimizer's state; the second is timed; the third is measured for
memory (``profiling.peak_memory``: the CUDA allocator's peak, or torch's MemTracker on CPU),
so the peak counts the weights, their gradients, the optimizer's state and the step's
activations, as a training run holds them from its second update on.
"""

import gc
import logging
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch
from fairseq import tasks, utils
from fairseq.dataclass.initialize import add_defaults, hydra_init
from fairseq.dataclass.utils import omegaconf_no_object_check
from fairseq.trainer import Trainer
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from pagesum_recipes.profiling import best_seconds, is_out_of_memory, peak_memory

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepCost:
    peak_bytes: float  # math.inf when the device ran out of memory
    seconds: float  # wall time of one step (math.nan when out of memory)
    source_tokens: int  # input tokens of the batch, padding excluded

    @property
    def tokens_per_second(self) -> float:
        return self.source_tokens / self.seconds if self.seconds > 0 else math.nan


def compose_config(config_dir: str | Path, config_name: str, overrides: List[str]) -> DictConfig:
    """The configuration ``fairseq-hydra-train --config-dir D --config-name N OVERRIDES`` trains with."""
    hydra_init(config_name)
    with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base=None):
        cfg = compose(config_name=config_name, overrides=list(overrides))
    add_defaults(cfg)
    with omegaconf_no_object_check():
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    OmegaConf.set_struct(cfg, True)
    return cfg


def costliest_batch(task, batch_size: int) -> Dict:
    """The training batch of the ``batch_size`` examples with the most tokens, collated by the
    task's own dataset."""
    task.load_dataset("train")
    dataset = task.dataset("train")
    cost = dataset.num_tokens_vec(np.arange(len(dataset)))  # (n_examples,)
    chosen = np.argsort(-cost, kind="stable")[:batch_size]
    return dataset.collater([dataset[int(i)] for i in chosen])


def torch_optimizer(trainer: Trainer) -> torch.optim.Optimizer:
    """The torch optimizer inside fairseq's wrappers (its state is what MemTracker follows)."""
    optimizer = trainer.optimizer
    while not isinstance(optimizer, torch.optim.Optimizer):
        optimizer = optimizer.optimizer
    return optimizer


def step_cost(config_dir: str | Path, config_name: str, overrides: List[str]) -> StepCost:
    """One training step of the experiment ``config_name`` with ``overrides`` (everything but
    ``checkpoint.save_dir``), measured."""
    with tempfile.TemporaryDirectory() as scratch:  # where fairseq would write crash.pt if the step failed
        cfg = compose_config(config_dir, config_name, [*overrides, f"checkpoint.save_dir={scratch}"])
        utils.import_user_module(cfg.common)
        device = torch.device("cpu" if cfg.common.cpu or not torch.cuda.is_available() else "cuda")
        gc.collect()  # what an earlier measurement left is freed, and not counted
        if device.type == "cuda":
            torch.cuda.empty_cache()
        resident = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        task = tasks.setup_task(cfg.task)
        model = task.build_model(cfg.model)
        criterion = task.build_criterion(cfg.criterion)
        trainer = Trainer(cfg, task, model, criterion)
        sample = costliest_batch(task, cfg.dataset.batch_size)
        source_tokens = int(sample["net_input"]["src_lengths"].sum())

        def step():
            trainer.train_step([sample], raise_oom=True)

        try:
            step()
            seconds = best_seconds(step, device, repeats=1, warmup=0)
            peak = peak_memory(step, device, [trainer.model, torch_optimizer(trainer)], root=trainer.criterion)
            cost = StepCost(peak.peak - resident, seconds, source_tokens)
        except RuntimeError as err:  # torch.cuda.OutOfMemoryError is one
            if not is_out_of_memory(err):
                raise
            cost = StepCost(math.inf, math.nan, source_tokens)
    logger.info(f"{config_name} {' '.join(overrides)}: peak {cost.peak_bytes / 2**20:.1f} MB, "
                f"{cost.seconds:.3f} s, {source_tokens} source tokens")
    return cost
