"""The decoding step's position as a tensor: what lets every step run with the same shapes.

A decoding step normally learns its position from the length of the summary prefix it is
given (fairseq's positional embedding) or from a count that its cache keeps (the decoder
self-attention). A search whose steps run as one captured graph
(``generation/static_search.py``) gives the decoder only each hypothesis's newest token, and
the position as a 0-d tensor kept in the search's decoding state under ``STEP_KEY``: then
no shape and no Python number changes from one step to the next, and the same graph serves
every step.
"""

from typing import Dict, Optional

import torch
import torch.nn.functional as F
from fairseq.modules import LearnedPositionalEmbedding
from torch import Tensor, nn

from .swap import swap_modules

STEP_KEY = "decoding_step"  # incremental_state[STEP_KEY]["position"]: (), the position the step writes
UNPADDED_KEY = "unpadded_prefixes"  # present in incremental_state: no summary prefix of the search holds padding


def set_step_position(incremental_state: Dict[str, Dict[str, Optional[Tensor]]], position: Tensor) -> None:
    """From now on, every step decoded with ``incremental_state`` is at ``position`` (a 0-d long
    tensor, which the search updates in place)."""
    incremental_state[STEP_KEY] = {"position": position}


def step_position(incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]]) -> Optional[Tensor]:
    """The step's position tensor, or None where the step learns its position from its shapes."""
    entry = None if incremental_state is None else incremental_state.get(STEP_KEY)  # one key looked up
    return None if entry is None else entry["position"]


def declare_unpadded_prefixes(incremental_state: Dict[str, Dict[str, Optional[Tensor]]]) -> None:
    """Say that every token decoded with ``incremental_state`` is a token the search chose or
    forced, never padding: a search never chooses padding (its log-probability is -inf), and
    padding in a forced prefix means that nothing is forced there. The decoder self-attention
    then leaves aside the padding mask the decoder hands every step, and spends no operator on it.
    (The decoder cannot learn this from the tokens without making the host wait for the device.)"""
    incremental_state[UNPADDED_KEY] = {}


def prefixes_unpadded(incremental_state: Dict[str, Dict[str, Optional[Tensor]]]) -> bool:
    """Whether the search declared its summary prefixes free of padding (``declare_unpadded_prefixes``)."""
    return UNPADDED_KEY in incremental_state


class StepPositionalEmbedding(LearnedPositionalEmbedding):
    """fairseq's learned positions; a step given its position as a tensor embeds that position,
    whatever the length of the tokens it is given."""

    @classmethod
    def like(cls, module: LearnedPositionalEmbedding) -> "StepPositionalEmbedding":
        """``module`` itself, as this class: the same weight under the same name, and no new
        parameter drawn (building one would move torch's random generator)."""
        module.__class__ = cls
        return module

    def forward(self, input: Tensor, incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
                positions: Optional[Tensor] = None) -> Tensor:
        position = step_position(incremental_state)
        if positions is not None or position is None:
            return super().forward(input, incremental_state, positions)
        index = (position + (self.padding_idx + 1)).view(1, 1)  # fairseq's positions start after padding
        return F.embedding(index, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)  # (1, 1, dim)


def embed_step_positions(decoder: nn.Module) -> int:
    """Let ``decoder``'s learned positions take a step's position as a tensor (in place, under
    the same names). Returns how many embeddings were replaced."""
    return swap_modules(decoder, LearnedPositionalEmbedding, StepPositionalEmbedding.like)


def is_plain_linear(module: nn.Module) -> bool:
    """Whether ``module`` is a plain linear layer with a bias, which a step may call as ``torch.addmm``
    on weights it prepared once per search; not one wrapped by hooks of its own (quantization noise)."""
    return (type(module) is nn.Linear and module.bias is not None and not module._forward_hooks
            and not module._forward_pre_hooks)


def transposed_weight(module: nn.Module) -> Optional[Tensor]:
    """A plain linear layer's weight transposed, (in, out), as a view (no copy), for a search to keep:
    its steps then call ``torch.addmm(bias, x, weight_t)`` without transposing it again at every
    step; None for any other module, which is called as itself."""
    return module.weight.t() if is_plain_linear(module) else None


def linear_step(module: nn.Module, x: Tensor, weight_t: Optional[Tensor], scale: float = 1.0) -> Tensor:
    """``module(x) * scale`` for x (tokens, in), in one ``addmm`` through the search's
    ``transposed_weight`` when it has one."""
    if weight_t is None:
        return module(x) if scale == 1.0 else module(x) * scale
    return torch.addmm(module.bias, x, weight_t, beta=scale, alpha=scale)


def select_rows(tensor: Tensor, order: Tensor) -> Tensor:
    """``tensor``'s rows in ``order`` (new rows,): written back in place when the number of rows
    is unchanged, so that a step captured as a graph finds the state where the last step left
    it; a new tensor when examples were dropped, or when ``tensor`` is an expanded view."""
    selected = tensor.index_select(0, order)
    overlapping = any(stride == 0 and size > 1 for stride, size in zip(tensor.stride(), tensor.shape))  # expanded
    return tensor.copy_(selected) if order.size(0) == tensor.size(0) and not overlapping else selected
