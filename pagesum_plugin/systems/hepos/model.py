"""HEPOS (Huang et al., NAACL 2021): BART that reads long inputs with efficient attentions.

The encoder reads one flat sequence of up to ``--max-source-positions`` tokens (the task's
``--view flat``: ``src_tokens`` (batch, 1, src_len), or plain (batch, src_len)); its
self-attention is chosen by ``--encoder-attention`` (full, sliding window with optional
global tokens and stride, LSH, Sinkhorn: Section 2). With LSH or Sinkhorn the layers
alternate, as in the authors' released model (``--encoder-layout hybrid``, the default):
layers 0, 2, 4, ... attend within a sliding window, layers 1, 3, 5, ... with LSH or
Sinkhorn; ``--encoder-layout uniform`` gives every layer LSH or Sinkhorn. The decoder's encoder-decoder attention
is chosen by ``--cross-attention``: HEPOS, head-wise positional strides (Section 3, Eq. 1),
full, or Linformer (the paper's encoder-decoder baseline).

Every BART weight loads from fairseq's BART checkpoints. Learned positions keep fairseq's
padding offset (rows 0..padding_idx are not positions); positions past BART's table are
initialised at random (the paper, ``--extend-positions random``), as copies of BART's last
position (``--extend-positions last``, the authors' code), or as copies of BART's table tiled
along the sequence (``--extend-positions tile``). Linformer's projections are the
only weights BART does not provide, and start fresh.
"""

import logging
from typing import Optional, Tuple

import torch
from fairseq.models import register_model, register_model_architecture
from fairseq.models.bart import BARTModel
from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture
from fairseq.models.transformer import TransformerDecoderBase, TransformerEncoderBase
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from torch import Tensor

from ...architectures import HEPOS_STRIDE, HEPOS_WINDOW
from ...errors import SettingError
from ..bart.arguments import as_bart_args, bart_dimensions
from ..bart.model import LongInputBARTModel, SyncFreeDecoder, SyncFreeEncoder, TokenWeightsOnRequest, wrap_layer
from ...modules.fused_layer import FusedAttentionLayer
from ...modules.output_projection import FewRowProjection
from .efficient_attention import LSHAttention, SinkhornAttention, SlidingWindowAttention
from .attention import CrossAttention, HeposAttention, LinformerCrossAttention

logger = logging.getLogger(__name__)

ENCODER_ATTENTIONS = ("full", "window", "lsh", "sinkhorn")
LEARNED_PATTERNS = ("lsh", "sinkhorn")  # what --encoder-layout alternates with sliding windows
ENCODER_LAYOUTS = ("hybrid", "uniform")
CROSS_ATTENTIONS = ("hepos", "full", "linformer")
POSITION_EXTENSIONS = ("random", "last", "tile")
# The paper's settings (Section 6.2): comparable memory with w = l * b_l = 2 * b_s = 256, s_h = n / k = 4.
DEFAULTS = dict(
    encoder_attention="full",
    encoder_layout="hybrid",  # the authors' release (LongDocSum): window and LSH/Sinkhorn layers alternate
    cross_attention="hepos",
    hepos_stride=HEPOS_STRIDE,
    extend_positions="random",
    window_size=HEPOS_WINDOW,
    global_tokens=0,
    window_stride=0,
    lsh_rounds=4,
    lsh_bucket_size=64,
    lsh_buckets=0,  # 0: default_lsh_buckets, the authors' count
    lsh_seed=1,
    sinkhorn_block_size=128,
    sinkhorn_iterations=7,  # the authors' sorting network (LongDocSum, utils/sinkhorn.py)
    sinkhorn_temperature=0.7,
    linformer_k=0,  # 0: max_source_positions / 4
)
NEW_PARAMETER_SUFFIXES = ("encoder_attn.compress_k.weight", "encoder_attn.compress_v.weight")
SOURCE_POSITIONS_KEY = "encoder.embed_positions.weight"


def option(cfg, name: str):
    """A HEPOS setting of ``cfg``, its default where the configuration predates it."""
    value = getattr(cfg, name, None)
    return DEFAULTS[name] if value is None else value


def flat_source(src_tokens: Tensor) -> Tensor:
    """(batch, 1, src_len) from the flat view, or (batch, src_len) -> (batch, src_len)."""
    if src_tokens.dim() == 3:
        if src_tokens.size(1) != 1:
            raise SettingError(f"HEPOS reads one flat sequence per example (the task's --view flat); "
                               f"got {src_tokens.size(1)} pages")
        src_tokens = src_tokens[:, 0]
    if src_tokens.dim() != 2:
        raise ValueError(f"src_tokens must be (batch, src_len) or (batch, 1, src_len), got {tuple(src_tokens.shape)}")
    return src_tokens


def layer_attention(cfg, layer_index: int) -> str:
    """The self-attention of encoder layer ``layer_index`` (0-based): ``--encoder-attention``,
    except that the hybrid layout gives the even layers of an LSH or Sinkhorn encoder a
    sliding window."""
    kind = option(cfg, "encoder_attention")
    layout = option(cfg, "encoder_layout")
    if layout not in ENCODER_LAYOUTS:
        raise SettingError(f"unknown --encoder-layout {layout!r}; choose from {', '.join(ENCODER_LAYOUTS)}")
    if kind in LEARNED_PATTERNS and layout == "hybrid" and layer_index % 2 == 0:
        return "window"
    return kind


def build_encoder_self_attention(cfg, embed_dim: int, layer_index: int):
    common = dict(dropout=cfg.attention_dropout, q_noise=cfg.quant_noise.pq, qn_block_size=cfg.quant_noise.pq_block_size)
    heads = cfg.encoder.attention_heads
    kind = layer_attention(cfg, layer_index)
    if kind == "window":
        return SlidingWindowAttention(embed_dim, heads, window_size=option(cfg, "window_size"),
                                      global_tokens=option(cfg, "global_tokens"), stride=option(cfg, "window_stride"),
                                      **common)
    if kind == "lsh":
        bucket_size = option(cfg, "lsh_bucket_size")
        n_buckets = option(cfg, "lsh_buckets") or default_lsh_buckets(cfg.max_source_positions, bucket_size)
        return LSHAttention(embed_dim, heads, rounds=option(cfg, "lsh_rounds"), bucket_size=bucket_size,
                            n_buckets=n_buckets, seed=option(cfg, "lsh_seed") + layer_index, **common)
    if kind == "sinkhorn":
        return SinkhornAttention(embed_dim, heads, block_size=option(cfg, "sinkhorn_block_size"),
                                 iterations=option(cfg, "sinkhorn_iterations"),
                                 temperature=option(cfg, "sinkhorn_temperature"), **common)
    raise SettingError(f"unknown --encoder-attention {kind!r}; choose from {', '.join(ENCODER_ATTENTIONS)}")


def default_lsh_buckets(positions: int, bucket_size: int) -> int:
    """The authors' bucket count (LongDocSum, ``utils/lsh_attention.py``, as Reformer's): the largest
    power of two at most twice the chunks of ``bucket_size`` in ``positions``, and at least 2."""
    return 2 ** max(1, (2 * (positions // bucket_size)).bit_length() - 1)


def build_cross_attention(cfg, embed_dim: int):
    common = dict(kdim=cfg.encoder.embed_dim, vdim=cfg.encoder.embed_dim, dropout=cfg.attention_dropout,
                  q_noise=cfg.quant_noise.pq, qn_block_size=cfg.quant_noise.pq_block_size)
    heads = cfg.decoder.attention_heads
    kind = option(cfg, "cross_attention")
    if kind == "hepos":
        return HeposAttention(embed_dim, heads, stride=option(cfg, "hepos_stride"), **common)
    if kind == "full":
        return CrossAttention(embed_dim, heads, **common)
    if kind == "linformer":
        compressed = option(cfg, "linformer_k") or max(1, cfg.max_source_positions // 4)
        return LinformerCrossAttention(embed_dim, heads, max_source_positions=cfg.max_source_positions,
                                       compressed=compressed, **common)
    raise SettingError(f"unknown --cross-attention {kind!r}; choose from {', '.join(CROSS_ATTENTIONS)}")


class HeposEncoderLayer(TransformerEncoderLayerBase):
    def __init__(self, cfg, layer_index: int):
        self.layer_index = layer_index  # read by build_self_attention, which the base constructor calls
        super().__init__(cfg)

    def build_self_attention(self, embed_dim, cfg):
        if layer_attention(cfg, self.layer_index) == "full":
            return super().build_self_attention(embed_dim, cfg)
        return build_encoder_self_attention(cfg, embed_dim, self.layer_index)


class HeposDecoderLayer(FusedAttentionLayer, TransformerDecoderLayerBase):
    def build_encoder_attention(self, embed_dim, cfg):
        return build_cross_attention(cfg, embed_dim)


class HeposEncoder(SyncFreeEncoder, TransformerEncoderBase):
    """BART's encoder over one long sequence, with the chosen self-attention."""

    def __init__(self, cfg, dictionary, embed_tokens):
        self.layers_built = 0  # numbers the layers as the base constructor builds them
        super().__init__(cfg, dictionary, embed_tokens)

    def build_encoder_layer(self, cfg):
        layer = HeposEncoderLayer(cfg, self.layers_built)
        self.layers_built += 1
        return wrap_layer(layer, cfg)

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, host_facts: Optional[Tuple[bool]] = None):
        src_tokens = flat_source(src_tokens)  # (batch, src_len)
        if src_tokens.size(1) > self.max_positions():
            raise SettingError(f"a source of {src_tokens.size(1)} tokens is longer than --max-source-positions "
                               f"{self.max_positions()}")
        has_pads = None if host_facts is None else host_facts[0]
        return self.forward_scriptable(src_tokens, src_lengths, return_all_hiddens, token_embeddings, has_pads)


class HeposDecoder(FewRowProjection, TokenWeightsOnRequest, SyncFreeDecoder, TransformerDecoderBase):
    """BART's decoder with the chosen encoder-decoder attention; a decoding step computes no
    token weights that nobody reads."""

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        return wrap_layer(HeposDecoderLayer(cfg, no_encoder_attn), cfg)


@register_model("hepos")
class HeposModel(LongInputBARTModel):
    """BART with efficient encoder self-attention and HEPOS encoder-decoder attention; its
    input is one flat sequence, (batch, 1, src_len) or (batch, src_len)."""

    encoder_class = HeposEncoder
    decoder_class = HeposDecoder
    # the generator's contract (generation/contract.py): one flat sequence, no pages
    mixes_pages = False
    prunes_pages = False

    @staticmethod
    def add_args(parser):
        BARTModel.add_args(parser)
        parser.add_argument("--encoder-attention", choices=ENCODER_ATTENTIONS,
                            help="encoder self-attention: full (BART), window (sliding window, optionally with "
                            "--global-tokens and --window-stride), lsh, sinkhorn (default: full)")
        parser.add_argument("--encoder-layout", choices=ENCODER_LAYOUTS,
                            help="with lsh or sinkhorn: hybrid (layers 0, 2, 4, ... use the sliding window of "
                            "--window-size, layers 1, 3, 5, ... lsh or sinkhorn, as the authors' released model) or "
                            "uniform (every layer lsh or sinkhorn) (default: hybrid)")
        parser.add_argument("--cross-attention", choices=CROSS_ATTENTIONS,
                            help="encoder-decoder attention: hepos (head-wise positional strides), full (BART), "
                            "linformer (default: hepos)")
        parser.add_argument("--hepos-stride", type=int, metavar="S",
                            help="HEPOS stride s_h: head h attends to source positions i = h mod s_h (default: 4)")
        parser.add_argument("--extend-positions", choices=POSITION_EXTENSIONS,
                            help="source positions past the loaded checkpoint's table: random (the paper), last "
                            "(each a copy of the table's last position: the authors' release) or tile (copies of "
                            "the table along the sequence) (default: random)")
        parser.add_argument("--window-size", type=int, metavar="W",
                            help="window: each token attends to W/2 tokens on each side (default: 256)")
        parser.add_argument("--global-tokens", type=int, metavar="G",
                            help="window: the first G tokens attend to and are attended by every token (default: 0)")
        parser.add_argument("--window-stride", type=int, metavar="S",
                            help="window: each token also attends to every S-th token, (i - j) mod S = 0 "
                            "(default: 0, off)")
        parser.add_argument("--lsh-rounds", type=int, metavar="L", help="lsh: hashing rounds (default: 4)")
        parser.add_argument("--lsh-bucket-size", type=int, metavar="B",
                            help="lsh: tokens per chunk of sorted buckets (default: 64)")
        parser.add_argument("--lsh-buckets", type=int, metavar="N",
                            help="lsh: number of hash buckets, even (default: 2 x max source positions / bucket size)")
        parser.add_argument("--lsh-seed", type=int, help="lsh: seed of the hash rotations at evaluation (default: 1)")
        parser.add_argument("--sinkhorn-block-size", type=int, metavar="B",
                            help="sinkhorn: tokens per block; a query sees its block and its sorted block (default: 128)")
        parser.add_argument("--sinkhorn-iterations", type=int, help="sinkhorn: normalisation iterations (default: 7)")
        parser.add_argument("--sinkhorn-temperature", type=float, help="sinkhorn: sorting temperature (default: 0.7)")
        parser.add_argument("--linformer-k", type=int, metavar="K",
                            help="linformer: keys and values are projected to K rows (default: max source positions / 4)")

    @classmethod
    def build_model(cls, args, task):
        args = as_bart_args(args)
        hepos_defaults(args)
        return super().build_model(args, task)

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        prefix = name + "." if name != "" else ""
        self.extend_source_positions(state_dict, prefix + SOURCE_POSITIONS_KEY)
        fresh = self.state_dict()
        new_keys = [key for key in fresh if key.endswith(NEW_PARAMETER_SUFFIXES)]
        if new_keys and not any(prefix + key in state_dict for key in new_keys):
            # A plain BART checkpoint: Linformer's projections are the only new weights.
            logger.info("initializing the Linformer projections fresh (not in the checkpoint)")
            for key in new_keys:
                state_dict[prefix + key] = fresh[key].clone()
        # Anything else missing or unexpected is left for strict loading to report by name.

    def extend_source_positions(self, state_dict, key: str) -> None:
        """Grow a checkpoint's (shorter) learned source positions to this model's length.

        Rows 0..padding_idx are fairseq's offset (not positions) and are kept with the
        checkpoint's positions; the rows past them are this model's fresh ones (random), copies
        of the checkpoint's last position (last: what LongDocSum's ``align_embed_position``
        does), or the checkpoint's positions repeated along the sequence (tile)."""
        ours = self.encoder.embed_positions.weight  # (max_source_positions + padding_idx + 1, dim)
        loaded = state_dict.get(key)
        if loaded is None or loaded.size(0) >= ours.size(0) or loaded.size(1) != ours.size(1):
            return  # nothing to extend; any other mismatch is reported by strict loading
        mode = option(self.args, "extend_positions")
        offset = self.encoder.padding_idx + 1
        extended = ours.detach().clone().to(loaded.dtype)
        extended[: loaded.size(0)] = loaded
        if mode == "tile":
            known = loaded.size(0) - offset  # the checkpoint's positions
            rows = torch.arange(loaded.size(0), ours.size(0))
            extended[loaded.size(0):] = loaded[offset + (rows - offset) % known]
        elif mode == "last":
            extended[loaded.size(0):] = loaded[-1]
        elif mode != "random":
            raise SettingError(f"unknown --extend-positions {mode!r}; choose from {', '.join(POSITION_EXTENSIONS)}")
        logger.info(f"extending source positions from {loaded.size(0) - offset} to {ours.size(0) - offset} ({mode})")
        state_dict[key] = extended


def hepos_defaults(args):
    for name, value in DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


@register_model_architecture("hepos", "hepos_bart_large")
def hepos_bart_large(args):
    hepos_defaults(args)
    bart_dimensions(args, "bart_large")
    bart_large_architecture(args)


@register_model_architecture("hepos", "hepos_bart_base")
def hepos_bart_base(args):
    hepos_defaults(args)
    bart_dimensions(args, "bart_base")
    bart_base_architecture(args)


@register_model_architecture("hepos", "hepos_tiny")
def hepos_tiny(args):
    """A BART-shaped model small enough for tests and CPU demos (pagesum_tiny's dimensions)."""
    bart_dimensions(args, "tiny")
    hepos_bart_base(args)
