"""Load fairseq checkpoints with ``torch.load``'s weights-only unpickler left on.

torch >= 2.6 refuses to unpickle anything but tensors and plain containers unless a
class is allowed. fairseq checkpoints also hold their training configuration, so we
allow exactly the classes that configuration is made of, and nothing else. Any
other class is refused by torch with a message naming it.
"""

import argparse
import pickle
import re
from typing import Any, Dict

import torch
from fairseq.distributed.utils import _TensorPlaceholder

from ..errors import CheckpointError

# Everything a fairseq checkpoint pickles besides tensors and plain containers:
# * argparse.Namespace: the training arguments ("args", and legacy models' cfg.model);
# * _TensorPlaceholder: how workers above rank 0 receive a broadcast checkpoint.
FAIRSEQ_CHECKPOINT_CLASSES = (argparse.Namespace, _TensorPlaceholder)

torch.serialization.add_safe_globals(list(FAIRSEQ_CHECKPOINT_CLASSES))


def load_checkpoint_file(path: str) -> Dict[str, Any]:
    """``torch.load`` a fairseq checkpoint on CPU, weights-only, with clear errors."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: checkpoint file not found") from None
    except pickle.UnpicklingError as err:
        raise CheckpointError(
            f"{path}: refused to unpickle {refused_global(err)}, which fairseq checkpoints do not contain. "
            f"Only tensors, containers and "
            f"{', '.join(c.__module__ + '.' + c.__qualname__ for c in FAIRSEQ_CHECKPOINT_CLASSES)} are allowed."
        ) from None
    except Exception as err:  # noqa: BLE001 - a text file gives KeyError, a truncated one EOFError, ...
        raise CheckpointError(f"{path}: not a readable PyTorch checkpoint (truncated, corrupted or another kind of "
                              f"file?): {type(err).__name__}: {first_line(err)}") from None
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(f"{path}: not a fairseq checkpoint (no 'model' entry)")
    return state


def refused_global(err: Exception) -> str:
    """The class torch's weights-only unpickler refused, as named in its message."""
    found = re.search(r"GLOBAL ([\w.]+)", str(err))
    return found.group(1) if found else f"an object ({first_line(err)})"


def first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
