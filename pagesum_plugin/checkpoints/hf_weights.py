"""State dicts between ``transformers`` BART (plus the PageSum authors' ``lin`` layer, or
``pagesum_plugin.hf``'s ``model.page_confidence``) and this plugin's fairseq layout: key mapping
both ways, reading weight files, and filling a built model strictly."""

import json
from pathlib import Path
from typing import Dict, Optional, Tuple

import torch

try:
    from safetensors.torch import load_file as load_safetensors
except ImportError as error:  # the hf extra is optional: say how to get it
    raise ImportError(f"pagesum-convert needs the hf extra (pip install 'pagesum[hf]'): {error}") from error

from ..systems.pagesum.model import fresh_confidence_state
from .errors import ConversionError

# the PageSum authors' lin layer -> this plugin's page confidence layer
LIN_KEYS = {"lin.weight": "decoder.page_confidence.weight", "lin.bias": "decoder.page_confidence.bias"}
# pagesum_plugin.hf's PageSumForConditionalGeneration -> this plugin's page confidence layer
PAGESUM_HF_KEYS = {"model.page_confidence.weight": "decoder.page_confidence.weight",
                   "model.page_confidence.bias": "decoder.page_confidence.bias"}


# Per-layer parameter names are the same in both layouts (self_attn.q_proj, fc1, ...).
def hf_to_fairseq_key(key: str) -> Optional[str]:
    """Map a BartForConditionalGeneration key to this plugin's key (None: handled apart)."""
    if key in LIN_KEYS or key in PAGESUM_HF_KEYS:
        return LIN_KEYS.get(key) or PAGESUM_HF_KEYS[key]
    for side in ("encoder", "decoder"):
        prefix = f"model.{side}."
        if key.startswith(prefix):
            rest = key[len(prefix):]
            if rest == "embed_tokens.weight":
                return None  # tied to model.shared
            return f"{side}.{rest}"
    return None


def shared_embeddings(hf_state: Dict[str, torch.Tensor], source: str) -> torch.Tensor:
    """The token embedding matrix (vocab, dim), checking every tied copy agrees."""
    names = ["model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
             "lm_head.weight"]
    present = [n for n in names if n in hf_state]
    if not present:
        raise ConversionError(f"{source}: no token embeddings (expected one of {names})")
    weight = hf_state[present[0]]
    for name in present[1:]:
        if not torch.equal(hf_state[name], weight):
            raise ConversionError(
                f"{source}: {name} differs from {present[0]}; fairseq BART ties the input embeddings "
                "and the output projection, so untied weights cannot be converted exactly")
    return weight


def check_final_logits_bias(hf_state: Dict[str, torch.Tensor], source: str) -> None:
    """fairseq's output projection has no bias: only an all-zero bias converts exactly."""
    bias = hf_state.get("final_logits_bias")
    if bias is not None and bool(bias.ne(0).any()):
        raise ConversionError(
            f"{source}: final_logits_bias is not zero (max |b| = {bias.abs().max().item():.3g}); "
            "fairseq's BART output projection has no bias, so dropping it would change every "
            "log-probability. Released BART checkpoints have an all-zero bias.")


def strip_module_prefix(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """State dicts saved from DistributedDataParallel prefix every key with 'module.'."""
    if state and all(k.startswith("module.") for k in state):
        return {k[len("module."):]: v for k, v in state.items()}
    return state


def hf_state_to_fairseq(hf_state: Dict[str, torch.Tensor], source: str) -> Dict[str, torch.Tensor]:
    """BART (+ ``lin``) state dict -> this plugin's parameter names (no buffers)."""
    check_final_logits_bias(hf_state, source)
    embeddings = shared_embeddings(hf_state, source)
    converted = {
        "encoder.embed_tokens.weight": embeddings,
        "decoder.embed_tokens.weight": embeddings,
        "decoder.output_projection.weight": embeddings,
    }
    tied_or_dropped = {"model.shared.weight", "model.encoder.embed_tokens.weight",
                       "model.decoder.embed_tokens.weight", "lm_head.weight", "final_logits_bias"}
    unknown = []
    for key, value in hf_state.items():
        target = hf_to_fairseq_key(key)
        if target is not None:
            converted[target] = value
        elif key not in tied_or_dropped:
            unknown.append(key)
    if unknown:
        raise ConversionError(f"{source}: keys with no place in a PageSum model: {sorted(unknown)[:10]}")
    return converted


def fairseq_state_to_hf(state: Dict[str, torch.Tensor]) -> Tuple[Dict[str, torch.Tensor], Dict[str, torch.Tensor]]:
    """This plugin's state dict -> (BartForConditionalGeneration state, lin state)."""
    embeddings = state["encoder.embed_tokens.weight"]
    hf = {"model.shared.weight": embeddings, "model.encoder.embed_tokens.weight": embeddings,
          "model.decoder.embed_tokens.weight": embeddings, "lm_head.weight": embeddings,
          "final_logits_bias": embeddings.new_zeros(1, embeddings.size(0))}
    lin = {}
    from_confidence = {v: k for k, v in LIN_KEYS.items()}
    for key, value in state.items():
        if key in from_confidence:
            lin[from_confidence[key]] = value
        elif key.endswith(".version") or key in ("decoder.embed_tokens.weight", "decoder.output_projection.weight",
                                                  "encoder.embed_tokens.weight"):
            continue  # fairseq bookkeeping buffers and tied copies
        elif key.startswith(("encoder.", "decoder.")):
            hf[f"model.{key}"] = value
        else:
            raise ConversionError(f"{key}: no place for it in transformers' BART")
    return hf, lin


def fairseq_state_to_pagesum_hf(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """This plugin's PageSum state dict -> ``PageSumForConditionalGeneration``'s (BART's names, no output bias,
    and ``model.page_confidence``)."""
    hf, lin = fairseq_state_to_hf(state)
    del hf["final_logits_bias"]
    hf_key_of = {fairseq_key: hf_key for hf_key, fairseq_key in PAGESUM_HF_KEYS.items()}
    return {**hf, **{hf_key_of[LIN_KEYS[key]]: value for key, value in lin.items()}}


def load_state_dict_file(path: Path) -> Dict[str, torch.Tensor]:
    """A state dict from ``.safetensors`` or a torch pickle (weights-only)."""
    if not path.exists():
        raise ConversionError(f"{path}: file not found")
    if path.suffix == ".safetensors":
        return load_safetensors(str(path))
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means the same to the user
        raise ConversionError(f"{path}: not a readable weights-only state dict ({err})") from None
    if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        raise ConversionError(f"{path}: expected a dict of tensors (a state dict)")
    return state


def hf_weights(hf_dir: Path) -> Optional[Dict[str, torch.Tensor]]:
    """The weights of a saved transformers directory (single file or sharded)."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (hf_dir / name).exists():
            return load_state_dict_file(hf_dir / name)
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (hf_dir / index_name).exists():
            shards = sorted(set(json.loads((hf_dir / index_name).read_text())["weight_map"].values()))
            state = {}
            for shard in shards:
                state.update(load_state_dict_file(hf_dir / shard))
            return state
    return None


def fill_model(model, converted: Dict[str, torch.Tensor], source: str) -> None:
    """Load converted weights strictly; a fresh confidence layer starts as on every path."""
    state = model.state_dict()
    missing = [k for k in state if k not in converted]
    new_layer = [k for k in missing if k in LIN_KEYS.values()]
    if new_layer and len(new_layer) != len(LIN_KEYS):
        raise ConversionError(f"{source}: only part of the lin layer is present: {new_layer} missing")
    if new_layer:
        converted = dict(converted, **fresh_confidence_state(state))
    buffers = {name for name, _ in model.named_buffers()}
    missing = [k for k in missing if k not in new_layer and k not in buffers]
    if missing:
        raise ConversionError(f"{source}: weights missing for {missing[:10]}")
    for key, value in converted.items():
        if key in state and tuple(value.shape) != tuple(state[key].shape):
            raise ConversionError(f"{source}: {key} has shape {tuple(value.shape)}, "
                                  f"the configuration needs {tuple(state[key].shape)}")
    full = {k: converted.get(k, v) for k, v in state.items()}
    model.load_state_dict(full, strict=True)
