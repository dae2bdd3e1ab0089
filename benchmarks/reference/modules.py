"""Every layer of the plugin on its path from before the fused kernels, the in-place caches and
the memory savings: what the benchmarks measure the library against and the equivalence tests
compare it with.

A layer's *twin* is an object of a subclass of the layer's own class (``BEFORE`` names, per
library class, the mixin that holds the path of before) that shares the layer's parameters,
buffers and children: ``before(module)``. ``reference_attention(model)`` swaps every such layer
of a built model for its twin while the context lasts, and back after
(``pagesum_plugin/modules/swap.py``):

* encoder-decoder attention: fairseq's ``MultiheadAttention`` (bmm + softmax, the score matrix
  kept in fp32 and in the model's precision);
* decoder self-attention: fairseq's attention and its one-copy cache at every step;
* dropout: ``F.dropout``, its mask kept in the input's dtype;
* ``fc2``: the activation, then fairseq's linear (the activation's output kept for backward);
* layer norms: every consumer keeps the output;
* decoders: fairseq's check for padding in the summary prefix at every step;
* HEPOS's cross-attention and efficient encoder attentions: their score matrices materialised;
* HED's cross-attention: the dense score matrix over the whole source and ``hierarchical_softmax``.
"""

import contextlib
from functools import lru_cache
from typing import Dict, Iterator, Optional, Tuple

import torch
from fairseq.modules import FairseqDropout, MultiheadAttention
from torch import Tensor, nn

from pagesum_plugin.modules.decoder_self_attention import DecoderSelfAttention
from pagesum_plugin.modules.dropout import BoolMaskDropout
from pagesum_plugin.modules.feed_forward import ActivationLinear
from pagesum_plugin.modules.fused_attention import FusedCrossAttention
from pagesum_plugin.modules.layer_norm import RecomputedLayerNorm
from pagesum_plugin.modules.swap import swap_modules
from pagesum_plugin.systems.bart.model import SyncFreeDecoder
from pagesum_plugin.systems.hed.attention import HierarchicalCrossAttention, document_shapes, hierarchical_softmax
from pagesum_plugin.systems.hepos.attention import CrossAttention
from pagesum_plugin.systems.hepos.efficient_attention import (SinkhornAttention, SlidingWindowAttention,
                                                              sinkhorn_attention, sliding_window_attention)


class CrossAttentionBefore:
    """fairseq's encoder-decoder attention: bmm + softmax, its own cache."""

    def forward(self, *args, **kwargs):
        return MultiheadAttention.forward(self, *args, **kwargs)


class SelfAttentionBefore:
    """fairseq's self-attention at every step, with the one-copy cache."""

    def takes_fused_path(self, before_softmax: bool = False) -> bool:
        return False


class DropoutBefore:
    def forward(self, x: Tensor, inplace: bool = False) -> Tensor:
        return FairseqDropout.forward(self, x, inplace)


class ActivationLinearBefore:
    def forward(self, h: Tensor) -> Tensor:
        return torch.nn.functional.linear(self.activation_fn(h), self.weight, self.bias)


class LayerNormBefore:
    def forward(self, x: Tensor) -> Tensor:
        return nn.LayerNorm.forward(self, x)


class DecoderBefore:
    """fairseq's decoder, which asks the device whether the summary prefix holds padding."""

    def extract_features_scriptable(self, *args, **kwargs):
        return super(SyncFreeDecoder, self).extract_features_scriptable(*args, **kwargs)


class HeposCrossAttentionBefore:
    """The score matrix materialised at every call, as when attention weights are asked for."""

    def _attend_fused(self, q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor]) -> Tensor:
        return self._attend_with_weights(q, k, v, mask)[0]


class SlidingWindowBefore:
    def attend(self, q, k, v, key_padding_mask):
        return sliding_window_attention(q, k, v, key_padding_mask, self.half_window, self.global_tokens, self.stride,
                                        self.dropout_module, fused=False)


class SinkhornBefore:
    def attend(self, q, k, v, key_padding_mask):
        return sinkhorn_attention(q, k, v, key_padding_mask, self.block_size, self.iterations, self.temperature,
                                  noise=self.training, dropout=self.dropout_module, fused=False)


class HEDCrossAttentionBefore:
    """The score matrix over the whole source, materialised, and ``hierarchical_softmax``."""

    def _memory(self, key: Tensor, value: Tensor, document_map: Tensor, beam: int) -> Dict:
        src_len, clusters, _ = key.shape
        k = self.k_proj(key).view(src_len, clusters, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        v = self.v_proj(value).view(src_len, clusters, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        # k, v: (clusters, heads, src_len, head_dim)
        starts, lengths, _ = document_shapes(document_map)  # (clusters, max_docs) each
        return {"document_map": document_map, "document_starts": starts, "document_lengths": lengths, "beam": beam,
                "prev_key": k, "prev_value": v}

    def _attend(self, q: Tensor, saved: Dict) -> Tuple[Tensor, Tensor]:
        k, v = saved["prev_key"], saved["prev_value"]  # (clusters, heads, src_len, head_dim)
        clusters, heads, queries, _ = q.shape
        src_len = k.size(2)
        scores = torch.matmul(q, k.transpose(-1, -2))  # (clusters, heads, queries, src_len)
        weights, doc_weights = hierarchical_softmax(scores.view(clusters, -1, src_len), saved["document_map"],
                                                    saved["document_starts"], saved["document_lengths"])
        probs = self.dropout_module(weights.type_as(v)).view(clusters, heads, queries, src_len)
        return torch.matmul(probs, v), doc_weights.view(clusters, heads, queries, -1)


# library class -> the mixin that holds its path of before (a subclass takes its nearest base's)
BEFORE = {
    FusedCrossAttention: CrossAttentionBefore,
    DecoderSelfAttention: SelfAttentionBefore,
    BoolMaskDropout: DropoutBefore,
    ActivationLinear: ActivationLinearBefore,
    RecomputedLayerNorm: LayerNormBefore,
    SyncFreeDecoder: DecoderBefore,
    CrossAttention: HeposCrossAttentionBefore,
    SlidingWindowAttention: SlidingWindowBefore,
    SinkhornAttention: SinkhornBefore,
    HierarchicalCrossAttention: HEDCrossAttentionBefore,
}


def mixin_of(cls: type) -> Optional[type]:
    return next((BEFORE[base] for base in cls.__mro__ if base in BEFORE), None)


@lru_cache(maxsize=None)
def twin_class(cls: type) -> type:
    """``cls`` on its path of before: a subclass with the mixin first."""
    return type(f"{cls.__name__}Before", (mixin_of(cls), cls), {"library_class": cls})


def before(module: nn.Module) -> nn.Module:
    """``module`` on its path of before: a twin sharing its parameters, buffers, children and settings."""
    twin = object.__new__(twin_class(type(module)))
    twin.__dict__ = dict(module.__dict__)  # the same parameter, buffer and child dictionaries
    return twin


@contextlib.contextmanager
def reference_attention(model: nn.Module, only: Optional[type] = None) -> Iterator[nn.Module]:
    """``model`` with every layer that has a path of before on it while the context lasts (with
    ``only``, the layers of that library class alone), then as it was."""
    classes = {type(m) for m in model.modules() if mixin_of(type(m)) and (only is None or isinstance(m, only))}
    originals: Dict[int, nn.Module] = {}

    def swap_in(module: nn.Module) -> nn.Module:
        twin = before(module)
        originals[id(twin)] = module
        return twin

    for cls in classes:
        swap_modules(model, cls, swap_in)
    try:
        yield model
    finally:
        for cls in classes:
            swap_modules(model, twin_class(cls), lambda twin: originals[id(twin)])
