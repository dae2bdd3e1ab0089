"""Loading a trained checkpoint for inference, with one clear line for each way a user can
point at the wrong thing: a folder or a file, a file that is not a fairseq checkpoint, a
data directory that is missing or was not the model's.

The data directory (``dict.txt``, ``meta.json`` and the tokenizer files) is, unless given,
the one the checkpoint was trained on (its stored ``task.data``), else the checkpoint's own
folder (what ``pagesum-convert from-hf`` writes).
"""

import os
import pickle
from pathlib import Path
from typing import List, Optional, Tuple

from fairseq import checkpoint_utils
from fairseq.dataclass.utils import overwrite_args_by_name

from ..corpus.format import META_FILE

from ..corpus.storage import load_dictionary
from ..errors import CheckpointError, written_by_torch_save
from .safety import first_line, refused_global


def checkpoint_path(model_dir: str, checkpoint_file: str) -> str:
    """``model_dir/checkpoint_file``, or ``model_dir`` itself when it is the checkpoint file."""
    if os.path.isfile(model_dir):
        return model_dir
    path = os.path.join(model_dir, checkpoint_file)
    if os.path.isfile(path):
        return path
    if not os.path.isdir(model_dir):
        raise CheckpointError(f"{model_dir}: no such folder or checkpoint file")
    present = sorted(name for name in os.listdir(model_dir) if name.endswith(".pt"))
    raise CheckpointError(f"{path}: no such checkpoint; {model_dir} holds "
                          f"{', '.join(present) if present else 'no .pt file'} (pass its name as checkpoint_file)")


def read_checkpoint(path: str, arg_overrides: dict) -> dict:
    """fairseq's own loading (weights-only, upgraded, ``arg_overrides`` applied), with errors
    that say what the file is."""
    try:
        state = checkpoint_utils.load_checkpoint_to_cpu(path, arg_overrides)
    except pickle.UnpicklingError as err:
        raise CheckpointError(f"{path}: refused to unpickle {refused_global(err)}, which fairseq checkpoints "
                              f"do not contain") from None
    except Exception as err:  # noqa: BLE001 - whatever torch or fairseq raised, the file is not a checkpoint
        if not written_by_torch_save(path):
            raise CheckpointError(f"{path}: not a checkpoint (fairseq-train and pagesum-convert write them with "
                                  f"torch.save; this file is something else)") from None
        raise CheckpointError(f"{path}: a torch.save file that is not a fairseq checkpoint "
                              f"({type(err).__name__}: {first_line(err)})") from None
    if not isinstance(state, dict) or "model" not in state or state.get("cfg") is None:
        raise CheckpointError(f"{path}: not a fairseq checkpoint (no model weights and configuration)")
    return state


def data_directory(state: dict, path: str, given: Optional[str]) -> str:
    """The data directory to read: ``given``, else the one stored in the checkpoint, else the
    checkpoint's folder; each must hold meta.json."""
    if given is not None:
        candidates: List[str] = [given]
    else:
        stored = state["cfg"].get("task", {}).get("data")
        candidates = [d for d in (stored, os.path.dirname(os.path.abspath(path))) if d]
    for candidate in candidates:
        if (Path(candidate) / META_FILE).is_file():
            return candidate
    looked = " or ".join(str(Path(c) / META_FILE) for c in candidates)
    raise CheckpointError(f"{path}: no data directory ({looked} not found); pass data_name_or_path= the folder "
                          f"pagesum-preprocess wrote for this model")


def check_dictionary(state: dict, path: str, data_dir: str) -> None:
    """The data directory's dictionary must be the one the model's embeddings were built for."""
    rows = next((v.size(0) for k, v in state["model"].items() if k.endswith("embed_tokens.weight")), None)
    size = len(load_dictionary(data_dir))
    if rows is not None and rows != size:
        raise CheckpointError(f"{data_dir}: its dict.txt has {size} symbols, but {path} was trained with {rows}; "
                              f"pass data_name_or_path= the data directory the model was trained on")


def load_for_inference(model_dir: str, checkpoint_file: str, data_name_or_path: Optional[str],
                       arg_overrides: dict) -> Tuple[object, object, str]:
    """(model, task, data directory) of a trained checkpoint, checked as above."""
    path = checkpoint_path(model_dir, checkpoint_file)
    state = read_checkpoint(path, arg_overrides)
    data_dir = data_directory(state, path, data_name_or_path)
    check_dictionary(state, path, data_dir)
    overwrite_args_by_name(state["cfg"], {"data": data_dir})
    models, _, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides={"data": data_dir,
                                                                                         **arg_overrides},
                                                                    state=state)
    return models[0], task, data_dir
