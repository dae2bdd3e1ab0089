"""Where the fit's search starts: the memory model's longest input for a system.

``pagesum_plugin.memory.model`` predicts a training step's peak from the shapes; the fit
(``fit.py``) measures real steps, and starts its bisection (``bisection.py``) at the longest
length the model predicts to fit, so that a good prediction costs two or three training steps
instead of the eight or so of a search from one unit. A system the model does not know starts
from one unit, as before.
"""

import logging
from dataclasses import replace
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from pagesum_plugin.architectures import LOSS_CHUNK_TOKENS, SPECIAL_SYMBOLS, architecture
from pagesum_plugin.corpus.format import DICT_FILE
from pagesum_plugin.memory.model import OPTIMIZERS, Step, predict

from .systems import PAGE_VIEWS, Comparison
from .systems import architecture as sized_architecture

logger = logging.getLogger(__name__)
CHUNKING_CRITERION = "paged_label_smoothed_cross_entropy"  # the plugin's: its loss takes --loss-chunk-tokens at a time


def model_step(comparison: Comparison, key: str, data: str | Path, model_size: Optional[str], dtype: str) -> Step:
    """The memory model's step for one unit of a system's input, as the fit trains it."""
    config: DictConfig = comparison.experiment(key)
    name = sized_architecture(config.model._name, model_size) if model_size else config.model._name
    system, arch = architecture(name)
    if system == "hepos" and config.model.get("encoder_attention", "full") == "full" \
            and config.model.get("cross_attention") == "full":
        system = "bart"  # the full-attention baseline is HEPOS's model with every attention full
    with open(Path(data) / DICT_FILE, encoding="utf-8") as words:
        vocab = SPECIAL_SYMBOLS + sum(1 for _ in words)
    optimizer = config.optimizer._name if config.optimizer._name in OPTIMIZERS else "adam"
    segment = int(comparison.awesome.get("max_input_tokens", 1024))
    page_tokens = segment if config.task.view == "segments" else comparison.unit
    return Step(system, replace(arch, vocab=vocab), 1, page_tokens,
                int(comparison.training.max_summary_tokens), batch=int(comparison.training.batch_size), dtype=dtype,
                checkpointing=bool(config.model.get("checkpoint_activations", False)), optimizer=optimizer,
                loss_chunk_tokens=loss_chunk_tokens(config))


def loss_chunk_tokens(config: DictConfig) -> int:
    """Summary tokens whose logits the experiment's criterion computes at once (0: all)."""
    if config.criterion._name != CHUNKING_CRITERION:
        return 0
    return int(config.criterion.get("loss_chunk_tokens", LOSS_CHUNK_TOKENS))


def at_length(step: Step, view: str, units: int, unit: int) -> Step:
    """``step`` reading ``units`` units of input through ``view``."""
    if view in PAGE_VIEWS or view == "documents":
        return replace(step, pages=units)
    if view == "segments":
        return replace(step, pages=max(1, units * unit // step.page_tokens))
    return replace(step, pages=1, page_tokens=units * unit)


def predicted_units(comparison: Comparison, key: str, data: str | Path, budget_bytes: float,
                    model_size: Optional[str], dtype: str) -> Optional[int]:
    """The most units the memory model predicts to fit ``budget_bytes`` (at least 1), or None
    when it does not know the system's architecture."""
    try:
        step = model_step(comparison, key, data, model_size, dtype)
    except ValueError as err:
        logger.info(f"{key}: no memory prediction ({err}); the search starts from one unit")
        return None
    view, cap = comparison.view(key), comparison.max_units_of(key)
    fitting = [units for units in range(1, cap + 1)
               if predict(at_length(step, view, units, comparison.unit)).peak <= budget_bytes]
    return max(fitting, default=1)
