"""PageSum (Liu et al., EMNLP 2022): a BART encoder-decoder that reads a document page by page.

Data layout. ``src_tokens`` is dense, (batch, max_pages, page_len): an example's pages
in document order, then all-padding pages up to ``max_pages``. The encoder packs the
real pages into (n_pages, page_len) rows, so padding pages cost no encoder or decoder
work, and records ``page_counts`` (batch,) in its output. Everything downstream
(the decoder, beam reordering, cached states) addresses pages through those counts.

Page decoding (Eq. 5-9). The decoder runs once per page on the same summary prefix,
a linear layer scores every page state, the scores are softmax-normalised over the
example's real pages, and the weighted sum of page states goes through BART's shared
output projection.

Global decoding (Table 6 ablation). The page encodings of an example are concatenated
and one decoder cross-attends to all of them; it is page decoding with one "page".
"""

import logging
from typing import Dict, List, Optional

import torch
import torch.nn as nn
from torch import Tensor

from fairseq.models import register_model, register_model_architecture
from fairseq.models.bart import BARTModel
from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerEncoder

from .bart_args import as_bart_args
from ..modules.page_mixing import mix_pages, real_pages, rows_of_pages, unpack_pages

logger = logging.getLogger(__name__)

PAGE_DECODING_CHOICES = ("page", "global")
CONFIDENCE_KEYS = ("decoder.page_confidence.weight", "decoder.page_confidence.bias")
PAGE_STATE_KEY = "pagesum_pages"  # where the decoder keeps its page bookkeeping


class PageSumEncoder(TransformerEncoder):
    """BART's encoder applied to every page independently (positions 0..len-1 per page)."""

    page_decoding: str = "page"

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
        token_embeddings: Optional[Tensor] = None,
    ):
        # src_tokens: (batch, max_pages, page_len); a padding page starts with <pad>
        if src_tokens.dim() != 3:
            raise ValueError(
                f"PageSum expects src_tokens of shape (batch, pages, page_len), got {tuple(src_tokens.shape)}"
            )
        real_page = real_pages(src_tokens, self.padding_idx)  # (batch, max_pages)
        page_counts = real_page.sum(dim=1)  # (batch,)
        if bool((page_counts == 0).any()):
            raise ValueError("every example needs at least one non-padding page")
        pages = src_tokens[real_page]  # (n_pages, page_len)
        # trim columns that are padding in every real page
        page_len = int(pages.ne(self.padding_idx).sum(dim=1).max())
        pages = pages[:, :page_len]
        page_lengths = pages.ne(self.padding_idx).sum(dim=1)  # (n_pages,)

        encoder_out = self.forward_scriptable(pages, page_lengths, return_all_hiddens, None)
        encoder_out["page_counts"] = [page_counts]
        if self.page_decoding == "global":
            encoder_out = concatenate_pages(encoder_out)
        return encoder_out

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Reorder by example (or beam) rows; every page moves with its row."""
        page_counts = encoder_out["page_counts"][0]  # (rows,)
        page_order = rows_of_pages(new_order, page_counts)  # (new_pages,)
        reordered = super().reorder_encoder_out(encoder_out, page_order)
        reordered["page_counts"] = [page_counts.index_select(0, new_order)]
        return reordered


def concatenate_pages(encoder_out: Dict[str, List[Tensor]]) -> Dict[str, List[Tensor]]:
    """Global decoding: join each example's page encodings into one memory.

    (src_len, n_pages, dim) -> (max_total_len, batch, dim); every page keeps only its
    non-padding positions, so the result does not depend on how pages were padded.
    """
    states = encoder_out["encoder_out"][0].transpose(0, 1)  # (n_pages, src_len, dim)
    padding = encoder_out["encoder_padding_mask"][0]  # (n_pages, src_len)
    page_counts = encoder_out["page_counts"][0]  # (batch,)
    example_of_page = torch.arange(page_counts.size(0), device=page_counts.device).repeat_interleave(page_counts)
    tokens_per_example = torch.zeros_like(page_counts).index_add_(0, example_of_page, (~padding).sum(1))

    keep = ~padding  # (n_pages, src_len)
    kept_states = states[keep]  # (n_tokens, dim), example after example
    kept_counts = tokens_per_example
    max_len = int(kept_counts.max())
    memory = unpack_pages(kept_states, kept_counts, max_len, fill=0.0)  # (batch, max_len, dim)
    memory_padding = torch.arange(max_len, device=padding.device)[None, :] >= kept_counts[:, None]
    return {
        "encoder_out": [memory.transpose(0, 1)],  # (max_len, batch, dim)
        "encoder_padding_mask": [memory_padding],  # (batch, max_len)
        "encoder_embedding": [],
        "encoder_states": [],
        "src_tokens": [],
        "src_lengths": [kept_counts.unsqueeze(1)],
        "page_counts": [torch.ones_like(page_counts)],
    }


class PageSumDecoder(TransformerDecoder):
    """BART's decoder run on every page, mixed by learned page confidences."""

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn, output_projection)
        # c_ij = w . h_ij + b  (Eq. 7): the only weights that BART does not provide
        self.page_confidence = nn.Linear(self.output_embed_dim, 1)

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: Optional[Dict[str, List[Tensor]]] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        features_only: bool = False,
        full_context_alignment: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
        src_lengths: Optional[Tensor] = None,
        return_all_hiddens: bool = False,
    ):
        # prev_output_tokens: (rows, tgt_len), one row per example (or beam)
        page_counts = encoder_out["page_counts"][0]  # (rows,)
        max_pages = self._max_pages(page_counts, incremental_state)
        page_prefix = prev_output_tokens.repeat_interleave(page_counts, dim=0)  # (n_pages, tgt_len)

        hidden, extra = self.extract_features(
            page_prefix,
            encoder_out=encoder_out,
            incremental_state=incremental_state,
            full_context_alignment=full_context_alignment,
            alignment_layer=alignment_layer,
            alignment_heads=alignment_heads,
        )  # hidden: (n_pages, tgt_len, dim)
        confidences = self.page_confidence(hidden).squeeze(-1)  # (n_pages, tgt_len)
        mixed, weights = mix_pages(hidden, confidences, page_counts, max_pages)
        # mixed: (rows, tgt_len, dim); weights: (rows, max_pages, tgt_len)

        extra["page_weights"] = weights
        # The generator records "attn" per step and reorders it with the beams, so the
        # page weights travel there: (rows, tgt_len, max_pages).
        extra["attn"] = [weights.transpose(1, 2)]
        if not features_only:
            mixed = self.output_layer(mixed)
        return mixed, extra

    def _max_pages(self, page_counts: Tensor, incremental_state) -> int:
        """Width of the page-weight matrix. During incremental decoding it is fixed at
        the first step, so weights keep one width while finished beams are pruned."""
        if incremental_state is None:
            return int(page_counts.max())
        state = incremental_state.get(PAGE_STATE_KEY)
        if state is None:
            state = {"page_counts": page_counts, "max_pages": page_counts.new_tensor([int(page_counts.max())])}
            incremental_state[PAGE_STATE_KEY] = state
        return int(state["max_pages"][0])

    def reorder_incremental_state_scripting(
        self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], new_order: Tensor
    ):
        """Beam search reorders rows (example x beam); cached states live on page rows."""
        state = incremental_state.get(PAGE_STATE_KEY)
        if state is None:  # nothing decoded yet, nothing cached
            return
        page_counts = state["page_counts"]
        page_order = rows_of_pages(new_order, page_counts)
        state["page_counts"] = page_counts.index_select(0, new_order)
        super().reorder_incremental_state_scripting(incremental_state, page_order)


@register_model("pagesum")
class PageSumModel(BARTModel):
    """BART with page-wise encoding and confidence-weighted page decoding."""

    mixes_pages = True  # the generator reads page weights from fairseq's "attn" slot

    @staticmethod
    def add_args(parser):
        BARTModel.add_args(parser)
        parser.add_argument(
            "--page-decoding",
            choices=PAGE_DECODING_CHOICES,
            help="page: one decoder pass per page, mixed by confidence (PageSum); "
            "global: one decoder over the concatenated page encodings (Table 6 ablation)",
        )

    @classmethod
    def build_model(cls, args, task):
        args = as_bart_args(args)
        model = super().build_model(args, task)
        model.encoder.page_decoding = getattr(args, "page_decoding", "page")
        return model

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return PageSumEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return PageSumDecoder(args, tgt_dict, embed_tokens, no_encoder_attn=getattr(args, "no_cross_attention", False))

    @property
    def page_decoding(self) -> str:
        return self.encoder.page_decoding

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Optional[Tensor],
        prev_output_tokens: Tensor,
        features_only: bool = False,
        return_all_hiddens: bool = False,
        **unused,
    ):
        # src_tokens: (batch, max_pages, page_len); prev_output_tokens: (batch, tgt_len)
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only)

    def set_beam_size(self, beam):
        """BART's beamable-attention shortcut assumes one encoder row per example and
        turns encoder reordering into a no-op; pages need real reordering, so keep it off."""

    def upgrade_state_dict_named(self, state_dict, name):
        super().upgrade_state_dict_named(state_dict, name)
        prefix = name + "." if name != "" else ""
        fresh = {key: self.state_dict()[key] for key in CONFIDENCE_KEYS}
        missing = [k for k in CONFIDENCE_KEYS if prefix + k not in state_dict]
        if len(missing) == len(CONFIDENCE_KEYS):
            # A plain BART checkpoint: the confidence layer is the only new module.
            logger.info("initializing the page confidence layer fresh (not in the checkpoint)")
            for key, value in fresh_confidence_state(fresh).items():
                state_dict[prefix + key] = value
        # Anything else missing or unexpected is left for strict loading to report by name.


def fresh_confidence_state(state: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """How the confidence layer starts when a plain BART is loaded, on every path (fairseq
    fine-tuning and pagesum-convert alike): zeros, so that the pages start with equal
    weights (the mean of BART's per-page states) and the start is deterministic."""
    return {key: torch.zeros_like(state[key]) for key in CONFIDENCE_KEYS}


def _pagesum_defaults(args):
    args.page_decoding = getattr(args, "page_decoding", "page")


@register_model_architecture("pagesum", "pagesum_bart_large")
def pagesum_bart_large(args):
    _pagesum_defaults(args)
    bart_large_architecture(args)


@register_model_architecture("pagesum", "pagesum_bart_base")
def pagesum_bart_base(args):
    _pagesum_defaults(args)
    bart_base_architecture(args)


@register_model_architecture("pagesum", "pagesum_tiny")
def pagesum_tiny(args):
    """A BART-shaped model small enough for tests and CPU demos."""
    args.encoder_embed_dim = getattr(args, "encoder_embed_dim", 64)
    args.encoder_ffn_embed_dim = getattr(args, "encoder_ffn_embed_dim", 128)
    args.encoder_layers = getattr(args, "encoder_layers", 2)
    args.encoder_attention_heads = getattr(args, "encoder_attention_heads", 4)
    args.decoder_layers = getattr(args, "decoder_layers", 2)
    args.decoder_attention_heads = getattr(args, "decoder_attention_heads", 4)
    pagesum_bart_base(args)
