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

Beam search. As in fairseq's BART, ``set_beam_size`` keeps the encoder output at one set
of pages per example instead of repeating it per beam. The decoder runs on
(example x page x beam) rows (``modules/page_mixing.PageLayout``), so each page's encoder
output and its cross-attention keys and values are stored once and read by all the
example's beams; only the self-attention states are kept per beam. ``set_beam_size(beam,
share_pages=False)`` keeps one copy per beam instead, the reference the shared layout is
tested and benchmarked against. The self-attention states grow by one position per step
for every page row; ``modules/decoder_self_attention.py`` writes each position once into a
preallocated cache that beams reorder through an index table. The first layer's
self-attention reads only the summary prefix, the same for every page of a hypothesis, so it
computes and caches one row per hypothesis and hands it to each of its page rows.

Global decoding (Table 6 ablation). The page encodings of an example are concatenated
and one decoder cross-attends to all of them; it is page decoding with one "page".
"""

import logging
from typing import Dict, List, NamedTuple, Optional

import torch
import torch.nn as nn
from torch import Tensor

from fairseq.models import register_model, register_model_architecture
from fairseq.models.bart import BARTModel
from fairseq.models.bart.model import bart_base_architecture, bart_large_architecture
from fairseq.models.transformer import TransformerDecoder, TransformerEncoder

from ..bart.arguments import bart_dimensions
from ..bart.model import NO_ALIGNMENT, LongInputBARTModel, SyncFreeDecoder, SyncFreeEncoder, wrap_layer
from ...modules.fused_layer import FusedDecoderLayer
from ...modules.output_projection import FewRowProjection
from ...modules.decoder_self_attention import DecoderSelfAttention, set_cache_beams
from ...modules.page_mixing import PageLayout, real_pages, rows_of_pages, unpack_pages

logger = logging.getLogger(__name__)

PAGE_DECODING_CHOICES = ("page", "global")
CONFIDENCE_KEYS = ("decoder.page_confidence.weight", "decoder.page_confidence.bias")
PAGE_STATE_KEY = "pagesum_pages"  # where the decoder keeps its page bookkeeping
# the fewest and the most pages of an example, host ints the encoder read back with its own, so
# that the decoder's page layout need not ask the device again; only the encoder's own output has it
PAGE_COUNT_RANGE = "page_count_range"
# the page slots that are padding, (batch * max_pages,) bool, where the encoder ran every slot
# (``PageSumEncoder.static_host_facts``): the decoder leaves them out of the page softmax
PADDING_SLOTS = "padding_slots"


class PageFacts(NamedTuple):
    """What the encoder's pass reads back from the device about a batch of pages, at once: the
    pages to encode, the fewest and the most an example has (the decoder's page layout), the
    tokens of the longest page (the columns kept) and of the shortest (whether a real page holds
    padding). ``every_slot``: facts of the batch's shape alone (``PageSumEncoder.static_host_facts``)."""

    pages: int
    fewest: int
    most: int
    longest: int
    shortest: int
    every_slot: bool = False


class PageSumEncoder(SyncFreeEncoder, TransformerEncoder):
    """BART's encoder applied to every page independently (positions 0..len-1 per page)."""

    page_decoding: str = "page"
    # Set by PageSumModel.set_beam_size: beam search leaves the encoder output at one set of
    # pages per example, which all its beams read.
    beams_share_pages: bool = False

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None, return_all_hiddens: bool = False,
                token_embeddings: Optional[Tensor] = None, host_facts: Optional[PageFacts] = None):
        # src_tokens: (batch, max_pages, page_len); a padding page starts with <pad>
        # host_facts: facts of the batch's shape (``static_host_facts``); None: read back here
        if src_tokens.dim() != 3:
            raise ValueError(
                f"PageSum expects src_tokens of shape (batch, pages, page_len), got {tuple(src_tokens.shape)}"
            )
        batch, max_pages, page_len = src_tokens.shape
        real_page = real_pages(src_tokens, self.padding_idx)  # (batch, max_pages)
        page_counts = real_page.sum(dim=1)  # (batch,)
        page_lengths = src_tokens.ne(self.padding_idx).sum(dim=2)  # (batch, max_pages), 0 on a padding page
        if host_facts is None:
            # the one read-back: the pages to encode, the fewest and most an example has (the decoder's
            # page layout), the columns to keep, whether any real page holds padding
            shortest = page_lengths.masked_fill(~real_page, page_len).min()
            host_facts = PageFacts(*torch.stack(
                [page_counts.sum(), *torch.aminmax(page_counts), page_lengths.max(), shortest]).tolist())
            if host_facts.fewest == 0:
                raise ValueError("every example needs at least one non-padding page")
        n_pages, fewest, most, longest, shortest, every_slot = host_facts
        pages = src_tokens.reshape(batch * max_pages, page_len)
        page_lengths = page_lengths.view(batch * max_pages)
        if every_slot:  # a padding page read as an empty one, <s> </s>: (batch * max_pages, page_len)
            empty = torch.full_like(pages[0], self.padding_idx)  # (page_len,), filled on the device
            empty[0], empty[1] = self.dictionary.bos(), self.dictionary.eos()
            pages = torch.where(real_page.view(-1, 1), pages, empty)
        if fewest < max_pages:  # pack the real pages, example after example: (n_pages, page_len)
            rows = torch.nonzero_static(real_page.view(-1), size=n_pages).squeeze(1)  # (n_pages,)
            pages, page_lengths = pages.index_select(0, rows), page_lengths.index_select(0, rows)
        pages = pages[:, :longest]  # trim columns that are padding in every real page

        encoder_out = self.forward_scriptable(pages, page_lengths, return_all_hiddens, None, has_pads=shortest < longest)
        encoder_out["page_counts"] = [page_counts if not every_slot else torch.full_like(page_counts, max_pages)]
        encoder_out[PAGE_COUNT_RANGE] = [fewest, most]
        if every_slot:
            encoder_out[PADDING_SLOTS] = [~real_page.view(-1)]
        if self.page_decoding == "global":
            encoder_out = join_every_slot(encoder_out, batch) if every_slot else concatenate_pages(encoder_out)
        return encoder_out

    def static_host_facts(self, src_tokens: Tensor) -> PageFacts:
        """Facts that hold for every batch of the shape of src_tokens (batch, max_pages, page_len),
        taken from the shape alone, so that a pass given them reads nothing back: every page slot
        is encoded and decoded, a padding page as an empty page (``<s> </s>``) that the page
        softmax leaves out (global decoding: that its memory masks, ``join_every_slot``); every
        column is kept; padding is assumed. The pass computes what the packed pass computes, to
        rounding."""
        batch, max_pages, page_len = src_tokens.shape
        return PageFacts(batch * max_pages, max_pages, max_pages, page_len, 0, every_slot=True)

    def forward_torchscript(self, net_input: Dict[str, Tensor]):
        """fairseq's generator encodes through this. A ``net_input`` that already holds the
        encoder output of its pages (``encoder_out``, from the generator's ``top_pages``
        scoring pass) is not encoded again."""
        if "encoder_out" in net_input:
            return net_input["encoder_out"]
        return super().forward_torchscript(net_input)

    def keep_pages(self, encoder_out: Dict[str, List[Tensor]], kept: Tensor) -> Dict[str, List[Tensor]]:
        """The encoder output of only the pages ``kept`` (batch, k), page numbers in document
        order, as encoding just those pages gives it: a kept slot past an example's last
        page is dropped, and positions that are padding in every kept page are cut."""
        page_counts = encoder_out["page_counts"][0]  # (batch,)
        first_page = torch.cumsum(page_counts, 0) - page_counts  # (batch,)
        real = kept < page_counts.unsqueeze(1)  # (batch, k)
        rows = (first_page.unsqueeze(1) + kept)[real]  # (kept pages,) packed, example after example
        pages = super().reorder_encoder_out(encoder_out, rows)
        padding = pages["encoder_padding_mask"][0]  # (kept pages, src_len)
        page_len = int((~padding).sum(dim=1).max())
        return {
            "encoder_out": [pages["encoder_out"][0][:page_len]],  # (page_len, kept pages, dim)
            "encoder_padding_mask": [padding[:, :page_len]],
            "encoder_embedding": [e[:, :page_len] for e in pages["encoder_embedding"]],
            "encoder_states": [state[:page_len] for state in pages["encoder_states"]],
            "src_tokens": [],
            "src_lengths": pages["src_lengths"],
            "page_counts": [real.sum(dim=1)],
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, List[Tensor]], new_order: Tensor):
        """Reorder by example (or beam) rows; every page moves with its row.

        When the beams share pages this does nothing, as BART's ``set_beam_size`` makes it:
        the encoder output stays one set of pages per example, the decoder keeps what it
        needs of it (the page layout, the cross-attention keys and values) at its first
        step, follows the beams and drops finished examples in its own cached state, and
        never reads the encoder output again."""
        if self.beams_share_pages:
            return encoder_out
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
    return one_memory(memory, memory_padding, kept_counts)


def join_every_slot(encoder_out: Dict[str, List[Tensor]], batch: int) -> Dict[str, List[Tensor]]:
    """Global decoding over every page slot encoded (``PageSumEncoder.static_host_facts``): each
    example's slots side by side as one memory, the padding positions and the padding slots
    masked, so that nothing is read back from the device. The decoder's cross-attention then
    gives what it gives over ``concatenate_pages``' memory, to rounding: the masked keys take no
    part in it.

    (page_len, batch * max_pages, dim) -> (max_pages * page_len, batch, dim)
    """
    states = encoder_out["encoder_out"][0]  # (page_len, batch * max_pages, dim)
    dim = states.size(2)
    # (batch * max_pages, page_len): a padding slot was encoded as <s> </s>, which its memory leaves out
    padding = encoder_out["encoder_padding_mask"][0] | encoder_out[PADDING_SLOTS][0].unsqueeze(1)
    memory = states.transpose(0, 1).reshape(batch, -1, dim)  # (batch, max_pages * page_len, dim)
    memory_padding = padding.view(batch, -1)  # (batch, max_pages * page_len)
    return one_memory(memory, memory_padding, (~memory_padding).sum(dim=1))


def one_memory(memory: Tensor, padding: Tensor, tokens: Tensor) -> Dict[str, List[Tensor]]:
    """Global decoding's encoder output: each example's memory (batch, mem_len, dim), its padding
    (batch, mem_len) and its real tokens (batch,), read by the decoder as one page."""
    return {
        "encoder_out": [memory.transpose(0, 1)],  # (mem_len, batch, dim)
        "encoder_padding_mask": [padding],
        "encoder_embedding": [],
        "encoder_states": [],
        "src_tokens": [],
        "src_lengths": [tokens.unsqueeze(1)],  # (batch, 1)
        "page_counts": [torch.ones_like(tokens)],
        PAGE_COUNT_RANGE: [1, 1],
    }


class PageSumDecoder(FewRowProjection, SyncFreeDecoder, TransformerDecoder):
    """BART's decoder run on every page, mixed by learned page confidences."""

    beams_share_pages: bool = False  # set with the encoder's by PageSumModel.set_beam_size

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn, output_projection)
        # c_ij = w . h_ij + b  (Eq. 7): the only weights that BART does not provide
        self.page_confidence = nn.Linear(self.output_embed_dim, 1)

    def build_decoder_layer(self, cfg, no_encoder_attn=False):
        """fairseq's layer construction (activation checkpointing, FSDP) with PageSum's layer."""
        return wrap_layer(FusedDecoderLayer(cfg, no_encoder_attn), cfg)

    def forward(self, prev_output_tokens: Tensor, encoder_out: Optional[Dict[str, List[Tensor]]] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None, features_only: bool = False,
                full_context_alignment: bool = False, alignment_layer: Optional[int] = None,
                alignment_heads: Optional[int] = None, src_lengths: Optional[Tensor] = None,
                return_all_hiddens: bool = False):
        # prev_output_tokens: (hypotheses, tgt_len), one row per example, or per beam
        layout = self._page_layout(prev_output_tokens, encoder_out, incremental_state)
        page_prefix = layout.expand(prev_output_tokens)  # (page rows, tgt_len)

        hidden, extra = self.extract_features(
            page_prefix,
            encoder_out=encoder_out,
            incremental_state=incremental_state,
            full_context_alignment=full_context_alignment,
            # PageSum's alignment is its page weights: no layer computes token weights unless asked
            alignment_layer=NO_ALIGNMENT if alignment_layer is None else alignment_layer,
            alignment_heads=alignment_heads,
        )  # hidden: (page rows, tgt_len, dim)
        confidences = self.page_confidence(hidden).squeeze(-1)  # (page rows, tgt_len)
        padding_slots = encoder_out.get(PADDING_SLOTS) if encoder_out is not None else None
        if padding_slots:  # every page slot decoded: a padding page's weight is exactly 0
            padding_rows = padding_slots[0].repeat_interleave(layout.beams)  # (page rows,)
            confidences = confidences.masked_fill(padding_rows.unsqueeze(1), float("-inf"))
        mixed, weights = layout.mix(hidden, confidences)
        # mixed: (hypotheses, tgt_len, dim); weights: (hypotheses, max_pages, tgt_len)

        extra["page_weights"] = weights
        # The generator records "attn" per step and reorders it with the beams, so the
        # page weights travel there: (hypotheses, tgt_len, max_pages).
        extra["attn"] = [weights.transpose(1, 2)]
        if not features_only:
            mixed = self.output_layer(mixed)
        return mixed, extra

    def _page_layout(self, prev_output_tokens: Tensor, encoder_out, incremental_state) -> PageLayout:
        """Which page rows the hypotheses have. Read from the encoder output on a full pass and
        at the first decoding step; later steps use the layout kept with the cached states,
        so that they read nothing back from the device, the page-weight width stays fixed
        while finished examples are dropped, and the encoder output is not needed again."""
        if incremental_state is not None and PAGE_STATE_KEY in incremental_state:
            return incremental_state[PAGE_STATE_KEY]
        page_counts = encoder_out["page_counts"][0]  # (groups,): examples, or examples x beams
        groups, hypotheses = page_counts.size(0), prev_output_tokens.size(0)
        if hypotheses % groups != 0:
            raise ValueError(f"{hypotheses} decoder rows cannot share the pages of {groups} encoder rows")
        n_pages = encoder_out["encoder_out"][0].size(1)  # (src_len, n_pages, dim)
        layout = PageLayout(page_counts, hypotheses // groups, n_pages, count_range=encoder_out.get(PAGE_COUNT_RANGE))
        if incremental_state is not None:
            incremental_state[PAGE_STATE_KEY] = layout
            # page rows are (group x page x beam): with shared pages, the beams of a page are
            # consecutive rows that beam search reorders among themselves
            set_cache_beams(self, layout.beams if self.beams_share_pages else None)
            shared = self._first_self_attention()
            if shared is not None and layout.repeats_prefixes:
                shared.share_rows(incremental_state, layout.first_row_of_hypothesis, layout.hypothesis_of_row)
        return layout

    def _first_self_attention(self) -> Optional[DecoderSelfAttention]:
        """The first layer's self-attention reads only the summary prefix, which every page row
        of a hypothesis repeats: in decoding it keeps one cache row per hypothesis, not one per
        page. (Only on the fused path, ``DecoderSelfAttention.takes_fused_path``, and not with
        fairseq's cross-self-attention, which also reads the page.)"""
        attention = next((m for m in self.layers[0].modules() if isinstance(m, DecoderSelfAttention)), None)
        if attention is None or not attention.takes_fused_path() or self.layers[0].cross_self_attention:
            return None
        return attention

    def reorder_incremental_state_scripting(
        self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], new_order: Tensor
    ):
        """Beam search reorders hypotheses (example x beam); cached states live on page rows.

        Self-attention states follow every page row (the first layer's, kept once per
        hypothesis, follow the hypotheses). Cross-attention keys and values are
        kept once per page of each encoder row and only move when finished examples are
        dropped (see ``PageLayout.reorder``)."""
        layout = incremental_state.get(PAGE_STATE_KEY)
        if layout is None:  # nothing decoded yet, nothing cached
            return
        layout, row_order, page_order = layout.reorder(new_order)
        incremental_state[PAGE_STATE_KEY] = layout
        for module in self.modules():
            if module is self or not hasattr(module, "reorder_incremental_state"):
                continue
            if isinstance(module, DecoderSelfAttention):  # by hypothesis if it shares its rows, else by row
                module.reorder_groups(incremental_state, new_order, row_order, layout.first_row_of_hypothesis,
                                      layout.hypothesis_of_row)
            elif getattr(module, "encoder_decoder_attention", False):
                if page_order is not None:
                    module.reorder_incremental_state(incremental_state, page_order)
            else:
                module.reorder_incremental_state(incremental_state, row_order)


@register_model("pagesum")
class PageSumModel(LongInputBARTModel):
    """BART with page-wise encoding and confidence-weighted page decoding; its input is
    (batch, max_pages, page_len), one row per page."""

    encoder_class = PageSumEncoder
    decoder_class = PageSumDecoder
    # the generator's contract (generation/contract.py)
    mixes_pages = True  # page weights in fairseq's "attn" slot

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
        model = super().build_model(args, task)
        model.encoder.page_decoding = getattr(args, "page_decoding", "page")
        return model

    @property
    def page_decoding(self) -> str:
        return self.encoder.page_decoding

    @property
    def prunes_pages(self) -> bool:
        """Page decoding mixes independently decoded pages, so a subset of them decodes alone;
        global decoding reads all pages as one sequence."""
        return self.page_decoding == "page"

    def keep_pages(self, encoder_out: Dict[str, List[Tensor]], kept: Tensor) -> Dict[str, List[Tensor]]:
        """The encoder output of only the pages ``kept`` (batch, k): ``PageSumEncoder.keep_pages``."""
        return self.encoder.keep_pages(encoder_out, kept)

    def set_beam_size(self, beam: int, share_pages: bool = True):
        """fairseq's beam search calls this before decoding. As with BART, the beams of an
        example then share its encoder output: each page's encoder states and
        cross-attention keys and values are stored once, not once per beam. With
        ``share_pages=False`` they are repeated per beam and reordered with the beams, the
        layout of a model without this hook. Either layout decodes any beam size: the
        decoder reads the number of beams per encoder row from the shapes it is given."""
        self.encoder.beams_share_pages = share_pages
        self.decoder.beams_share_pages = share_pages

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
    bart_dimensions(args, "bart_large")
    bart_large_architecture(args)


@register_model_architecture("pagesum", "pagesum_bart_base")
def pagesum_bart_base(args):
    _pagesum_defaults(args)
    bart_dimensions(args, "bart_base")
    bart_base_architecture(args)


@register_model_architecture("pagesum", "pagesum_tiny")
def pagesum_tiny(args):
    """A BART-shaped model small enough for tests and CPU demos."""
    bart_dimensions(args, "tiny")
    pagesum_bart_base(args)
