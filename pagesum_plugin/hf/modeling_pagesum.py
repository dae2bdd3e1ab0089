"""PageSum (Liu et al., EMNLP 2022) for transformers: BART that reads a document page by page.

Inputs. `input_ids` and `attention_mask` are (batch, pages, page_len): an example's pages in document order, then
pages without tokens up to `pages`. A page with no token in `attention_mask` is not part of the example.

Encoding. BART's encoder reads every page on its own (positions 0..page_len-1 on each page).

Decoding (Eq. 5-9 of the paper). The decoder runs once per page on the same summary prefix, cross-attending only
that page; a linear layer scores the last decoder state of every page (the confidence, Eq. 7), the scores are
softmax-normalised over the example's real pages (Eq. 8), and the weighted sum of the page states (Eq. 9) goes
through BART's output projection.

Rows. The decoder's rows are (example, page, beam), the beam innermost. In training and in a plain forward pass
there is one "beam" per example. In `generate()`, the encoder output stays at one set of pages per example
(`_expand_inputs_for_generation`), and the decoder learns how many hypotheses each example has from the decoder
input it is given. The beams of a page are consecutive rows, so the page's cross-attention reads them as that many
times more query positions of one row (`PageCrossAttention`): every page's encoder states and cross-attention keys
and values are computed and cached once for all its beams, not once per beam. Only the self-attention cache is
kept per (example, page, beam); `PageCache.reorder_cache` moves every page row with its hypothesis.

Summaries are `<s> ... </s>`, as the training targets: `SummaryRules` makes `generate()` give what the plugin's page
generator gives, with the same scores (`summary_lengths` says how its length settings read in `generate()`'s).
"""

import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache, StaticCache
from transformers.generation import LogitsProcessor
from transformers.modeling_outputs import BaseModelOutput, ModelOutput
from transformers.models.bart.modeling_bart import (BartAttention, BartDecoder, BartEncoder, BartScaledWordEmbedding,
                                                    shift_tokens_right)

# absolute: transformers copies a saved model's code with its sibling imports only
from pagesum_plugin.chunked_loss import chunked_label_smoothed_nll_loss, fp16_logits, label_smoothed_nll_sums

from .configuration_pagesum import PageSumConfig

IGNORE_INDEX = -100  # transformers' label for positions without a target


# ---- outputs ------------------------------------------------------------------------------------------------------

@dataclass
class PageSumEncoderOutput(BaseModelOutput):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(batch, pages, page_len, dim)`):
        BART's encoder output of every page, encoded on its own.
    attention_mask (`torch.LongTensor` of shape `(batch, pages, page_len)`):
        The tokens the decoder's cross-attention reads. A page without tokens reads its first position, so that
        its (unused) decoder rows stay finite; its mixing weight is exactly 0.
    page_mask (`torch.BoolTensor` of shape `(batch, pages)`):
        The real pages, those with at least one token.
    """

    attention_mask: torch.LongTensor | None = None
    page_mask: torch.BoolTensor | None = None


@dataclass
class PageSumModelOutput(ModelOutput):
    r"""
    last_hidden_state (`torch.FloatTensor` of shape `(hypotheses, tgt_len, dim)`):
        The page-mixed decoder states (Eq. 9 before the output projection).
    page_weights (`torch.FloatTensor` of shape `(hypotheses, pages, tgt_len)`, *optional*):
        The mixing weights (Eq. 8): they sum to 1 over an example's real pages and are exactly 0 on the others.
        Returned with `output_page_weights=True`.
    cache (`PageCache`, *optional*):
        The decoder's self-attention states per (example, page, beam) and cross-attention states per page.
    encoder_outputs (`PageSumEncoderOutput`):
        The page encodings that the decoder read.
    """

    last_hidden_state: torch.FloatTensor | None = None
    page_weights: torch.FloatTensor | None = None
    cache: Cache | None = None
    encoder_outputs: PageSumEncoderOutput | None = None


@dataclass
class PageSumSeq2SeqLMOutput(ModelOutput):
    r"""
    loss (`torch.FloatTensor` of shape `()`, *optional*):
        The paper's label-smoothed cross entropy per target token, returned when `labels` are given.
    logits (`torch.FloatTensor` of shape `(hypotheses, tgt_len, vocab)`, *optional*):
        The output projection of the page-mixed states; `None` where a training pass took the loss a chunk at a
        time (`PageSumConfig.loss_chunk_tokens`).
    page_weights, cache, encoder_outputs:
        As in [`PageSumModelOutput`].
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    page_weights: torch.FloatTensor | None = None
    cache: Cache | None = None
    encoder_outputs: PageSumEncoderOutput | None = None


# ---- page rows ----------------------------------------------------------------------------------------------------

def page_rows(hypothesis_rows: torch.Tensor, examples: int, pages: int) -> torch.Tensor:
    """(examples * beams, *rest) -> (examples * pages * beams, *rest): every hypothesis once for each page of its
    example, rows ordered (example, page, beam)."""
    beams, rest = hypothesis_rows.shape[0] // examples, hypothesis_rows.shape[1:]
    grid = hypothesis_rows.view(examples, 1, beams, *rest).expand(examples, pages, beams, *rest)
    return grid.reshape(examples * pages * beams, *rest)


def page_row_order(beam_idx: torch.LongTensor, pages: int, beams: int) -> torch.LongTensor:
    """The order of the page rows for an order of the hypotheses.

    beam_idx: (examples * beams,) the hypothesis each new hypothesis continues (within its example, as beam search
    keeps it). Returns (examples * pages * beams,) the page row each new page row continues: the same page of the
    continued hypothesis."""
    continued = beam_idx.view(-1, 1, beams)  # (examples, 1, beams)
    example, beam = continued // beams, continued % beams
    page = torch.arange(pages, device=beam_idx.device).view(1, pages, 1)
    return ((example * pages + page) * beams + beam).view(-1)


def mix_pages(hidden: torch.Tensor, confidences: torch.Tensor, page_mask: torch.Tensor):
    """Eq. 8 and Eq. 9 before the output projection.

    hidden:      (examples * pages * beams, tgt_len, dim) the last decoder states of every page row
    confidences: (examples * pages * beams, tgt_len) the page scores c_ij (Eq. 7)
    page_mask:   (examples, pages) bool, the real pages
    Returns the mixed states (examples * beams, tgt_len, dim) and the weights (examples * beams, pages, tgt_len).
    """
    examples, pages = page_mask.shape
    beams, (tgt_len, dim) = hidden.shape[0] // (examples * pages), hidden.shape[1:]
    grid = hidden.view(examples, pages, beams, tgt_len, dim)
    # the softmax runs in fp32 whatever the model's precision, so that the weights of a half model still sum to 1
    scores = confidences.float().view(examples, pages, beams, tgt_len)
    scores = scores.masked_fill(~page_mask[:, :, None, None], -math.inf)
    weights = scores.softmax(dim=1)  # (examples, pages, beams, tgt_len)
    mixed = torch.einsum("epbt,epbtd->ebtd", weights.to(hidden.dtype), grid)  # (examples, beams, tgt_len, dim)
    return mixed.reshape(examples * beams, tgt_len, dim), weights.transpose(1, 2).reshape(examples * beams, pages,
                                                                                          tgt_len)


class PageCache(EncoderDecoderCache):
    """transformers' encoder-decoder cache over page rows: the self-attention cache holds one row per (example, page,
    beam), the cross-attention cache one per (example, page), read by all the page's beams (`PageCrossAttention`)."""

    def __init__(self, self_attention_cache: Cache, cross_attention_cache: Cache, pages: int, beams: int):
        super().__init__(self_attention_cache, cross_attention_cache)
        self.pages, self.beams = pages, beams

    def reorder_cache(self, beam_idx: torch.LongTensor):
        """Beam search continues hypotheses `beam_idx` (examples * beams,): every page row follows its hypothesis.
        The cross-attention states stay: beams never leave their example, and all the beams of a page share them."""
        self.self_attention_cache.reorder_cache(page_row_order(beam_idx, self.pages, self.beams))


# ---- modules ------------------------------------------------------------------------------------------------------

class PageCrossAttention(BartAttention):
    """BART's cross-attention, for decoder rows ordered (page, beam) over encoder rows of one page each: the beams of
    a page attend as extra query positions of the page's row, so that its keys and values are computed, cached and
    read once for all of them. Without beams (one decoder row per page) it is BART's cross-attention."""

    def forward(self, hidden_states, key_value_states=None, cache=None, attention_mask=None, **kwargs):
        # hidden_states: (pages * beams, tgt_len, dim); key_value_states: (pages, page_len, dim)
        # attention_mask: None or (pages, 1, tgt_len, page_len), the same for every target position
        rows, tgt_len, dim = hidden_states.shape
        pages = key_value_states.shape[0]
        beams = rows // pages
        queries = hidden_states.view(pages, beams * tgt_len, dim)  # a view: the beams of a page are consecutive
        if attention_mask is not None:
            attention_mask = attention_mask[:, :, :1].expand(-1, -1, beams * tgt_len, -1)
        output, weights = super().forward(queries, key_value_states, cache, attention_mask, **kwargs)
        if weights is not None:  # (pages, heads, beams * tgt_len, page_len) -> (rows, heads, tgt_len, page_len)
            heads, page_len = weights.shape[1], weights.shape[-1]
            weights = weights.view(pages, heads, beams, tgt_len, page_len).transpose(1, 2)
            weights = weights.reshape(rows, heads, tgt_len, page_len)
        return output.view(rows, tgt_len, dim), weights


class PageSumEncoder(BartEncoder):
    """BART's encoder applied to every page on its own."""

    def forward(self, input_ids=None, attention_mask=None, inputs_embeds=None, **kwargs) -> PageSumEncoderOutput:
        # input_ids: (batch, pages, page_len); attention_mask: (batch, pages, page_len), or (batch, pages) to mark
        # pages only (generate() makes one so when none is given), or None: the tokens are those that are not padding
        if input_ids is None or input_ids.dim() != 3:
            raise ValueError("PageSum reads input_ids of shape (batch, pages, page_len)")
        tokens = input_ids.ne(self.padding_idx)
        if attention_mask is not None:
            mask = attention_mask.bool()
            tokens = mask if mask.dim() == 3 else tokens & mask[:, :, None]
        page_mask = tokens.any(dim=-1)  # (batch, pages)
        every_example_read = page_mask.any(dim=1).all()
        if torch.compiler.is_compiling():  # a compiled forward asserts on the device instead of reading it back
            torch._assert_async(every_example_read, "every example needs at least one page with tokens")
        elif not bool(every_example_read):
            raise ValueError("every example needs at least one page with tokens")
        # a page without tokens attends to its first position: finite states that no mixing weight reads
        readable = tokens.clone()
        readable[:, :, 0] |= ~page_mask
        batch, pages, page_len = input_ids.shape
        encoded = super().forward(input_ids=input_ids.view(batch * pages, page_len),
                                  attention_mask=readable.view(batch * pages, page_len).long(), **kwargs)
        return PageSumEncoderOutput(
            last_hidden_state=encoded.last_hidden_state.view(batch, pages, page_len, -1),
            hidden_states=None if encoded.hidden_states is None else tuple(
                h.view(batch, pages, page_len, -1) for h in encoded.hidden_states),
            attentions=encoded.attentions,  # (batch * pages, heads, page_len, page_len) per layer
            attention_mask=readable.long(),
            page_mask=page_mask,
        )


class PageSumDecoder(BartDecoder):
    """BART's decoder whose cross-attention lets the beams of a page share its keys and values."""

    def __init__(self, config: PageSumConfig):
        super().__init__(config)
        for index, layer in enumerate(self.layers):
            layer.encoder_attn = PageCrossAttention(config.d_model, config.decoder_attention_heads,
                                                    dropout=config.attention_dropout, is_decoder=True, config=config,
                                                    layer_idx=index)


# ---- models -------------------------------------------------------------------------------------------------------

class PageSumPreTrainedModel(PreTrainedModel):
    config_class = PageSumConfig
    config: PageSumConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = [r"BartEncoderLayer", r"BartDecoderLayer"]
    _supports_sdpa = True  # eager and sdpa: PageCrossAttention folds beams into a dense mask
    _supports_flash_attn = False
    _supports_flex_attn = False
    _can_compile_fullgraph = True  # training and, with the static cache, decoding (tests/test_hf_pagesum.py)


class PageSumModel(PageSumPreTrainedModel):
    """The page encoder, the page decoder and the confidence layer; BART's parameter names, plus
    `page_confidence`."""

    _tied_weights_keys = {"decoder.embed_tokens.weight": "shared.weight", "encoder.embed_tokens.weight": "shared.weight"}

    def __init__(self, config: PageSumConfig):
        super().__init__(config)
        embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.shared = BartScaledWordEmbedding(config.vocab_size, config.d_model, config.pad_token_id,
                                              embed_scale=embed_scale)
        self.encoder = PageSumEncoder(config)
        self.decoder = PageSumDecoder(config)
        # c_ij = w . h_ij + b (Eq. 7): the only weights that BART does not have
        self.page_confidence = nn.Linear(config.d_model, 1)
        self.post_init()

    def _init_weights(self, module):
        super()._init_weights(module)
        if module is getattr(self, "page_confidence", None):
            # zeros: the pages start with equal weights (the mean of BART's page states), as in the plugin
            nn.init.zeros_(module.weight)
            nn.init.zeros_(module.bias)

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, value):
        self.shared = value
        self.encoder.embed_tokens = self.shared
        self.decoder.embed_tokens = self.shared

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.LongTensor | None = None,
        encoder_outputs: PageSumEncoderOutput | None = None,
        cache: Cache | None = None,
        use_cache: bool | None = None,
        output_page_weights: bool = False,
        **kwargs,
    ) -> PageSumModelOutput:
        # input_ids, attention_mask: (batch, pages, page_len); decoder_input_ids: (hypotheses, tgt_len), where
        # hypotheses is batch x beams (beams = 1 outside generate())
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        page_states = encoder_outputs.last_hidden_state  # (batch, pages, page_len, dim)
        batch, pages, page_len, dim = page_states.shape
        beams = decoder_input_ids.shape[0] // batch
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and not isinstance(cache, PageCache):
            cache = cache or EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
            cache = PageCache(cache.self_attention_cache, cache.cross_attention_cache, pages, beams)

        decoded = self.decoder(
            input_ids=page_rows(decoder_input_ids, batch, pages),  # (batch * pages * beams, tgt_len)
            attention_mask=None if decoder_attention_mask is None else page_rows(decoder_attention_mask, batch, pages),
            encoder_hidden_states=page_states.view(batch * pages, page_len, dim),
            encoder_attention_mask=encoder_outputs.attention_mask.view(batch * pages, page_len),
            cache=cache if use_cache else None,
            use_cache=use_cache,
            **kwargs,
        )
        hidden = decoded.last_hidden_state  # (batch * pages * beams, tgt_len, dim)
        confidences = self.page_confidence(hidden).squeeze(-1)  # (batch * pages * beams, tgt_len)
        mixed, weights = mix_pages(hidden, confidences, encoder_outputs.page_mask)
        return PageSumModelOutput(last_hidden_state=mixed, page_weights=weights if output_page_weights else None,
                                  cache=cache if use_cache else None, encoder_outputs=encoder_outputs)


class PageSumForConditionalGeneration(PageSumPreTrainedModel, GenerationMixin):
    """PageSum with BART's output projection: logits, the paper's training loss, and `generate()`."""

    _tied_weights_keys = {"lm_head.weight": "model.shared.weight"}

    def __init__(self, config: PageSumConfig):
        super().__init__(config)
        self.model = PageSumModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_encoder(self, modality=None):
        return self.model.encoder

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.LongTensor | None = None,
        encoder_outputs: PageSumEncoderOutput | None = None,
        cache: Cache | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_page_weights: bool = False,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> PageSumSeq2SeqLMOutput:
        r"""
        input_ids, attention_mask (`(batch, pages, page_len)`): the pages; a page without tokens is not one.
        decoder_input_ids (`(hypotheses, tgt_len)`): the summary prefix `</s> <s> ...`; made from `labels` if absent.
        labels (`(batch, tgt_len)`): `<s> summary </s>`, -100 (or padding) where there is no target.
        output_page_weights: also return the page weights (hypotheses, pages, tgt_len).
        num_items_in_batch: the target tokens the loss is divided by (the Trainer's count over the accumulated
            batches and processes); the batch's own by default.
        """
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None:
                decoder_input_ids = shift_tokens_right(labels, self.config.pad_token_id,
                                                       self.config.decoder_start_token_id)
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                             decoder_attention_mask=decoder_attention_mask, encoder_outputs=encoder_outputs,
                             cache=cache, use_cache=use_cache, output_page_weights=output_page_weights, **kwargs)
        hidden, config = outputs.last_hidden_state, self.config  # (hypotheses, tgt_len, dim)
        chunked = (labels is not None and self.training and config.loss_chunk_tokens > 0
                   and not fp16_logits(self.lm_head.weight))
        if chunked:  # one chunk's logits at a time, their gradients taken at once
            target = scored_target(labels, config.pad_token_id)  # (batch, tgt_len)
            loss, _, _ = chunked_label_smoothed_nll_loss(
                hidden.reshape(-1, hidden.size(-1)), self.lm_head.weight, self.lm_head.bias, target.view(-1),
                config.label_smoothing, config.pad_token_id, config.loss_chunk_tokens, count_correct=False)
            logits, loss = None, loss / target_count(target, config.pad_token_id, num_items_in_batch)
        else:
            logits = self.lm_head(hidden)  # (hypotheses, tgt_len, vocab)
            loss = None if labels is None else label_smoothed_loss(logits, labels, config.label_smoothing,
                                                                   config.pad_token_id, num_items_in_batch)
        return PageSumSeq2SeqLMOutput(loss=loss, logits=logits, page_weights=outputs.page_weights,
                                      cache=outputs.cache, encoder_outputs=outputs.encoder_outputs)

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor):
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    # ---- generate() ----

    def _expand_inputs_for_generation(self, expand_size: int = 1, is_encoder_decoder: bool = False,
                                      input_ids: torch.LongTensor | None = None, **model_kwargs):
        """generate() repeats every input once per hypothesis of an example; the pages are left at one copy per
        example (`forward` reads the number of hypotheses from the decoder input)."""
        per_example = {key: model_kwargs.pop(key) for key in ("encoder_outputs", "attention_mask")
                       if key in model_kwargs}
        input_ids, model_kwargs = super()._expand_inputs_for_generation(expand_size, False, input_ids,
                                                                        **model_kwargs)
        return input_ids, {**model_kwargs, **per_example}

    def _prepare_static_cache(self, cache_implementation: str, batch_size: int, max_cache_len: int,
                              prefill_chunk_size: int | None, model_kwargs) -> Cache:
        """`generate(cache_implementation="static")`: transformers' static cache, its cross-attention half sized to
        a page (`page_len` positions) rather than to the encoder output's second dimension, which is the pages. Its
        rows are sized at the first step, by the states written: (example, page, beam) and (example, page)."""
        cache = super()._prepare_static_cache(cache_implementation, batch_size, max_cache_len, prefill_chunk_size,
                                              model_kwargs)
        page_len = model_kwargs["encoder_outputs"].last_hidden_state.shape[2]
        cross = StaticCache(config=self.config.get_text_config(decoder=True), max_cache_len=page_len,
                            offloading="offloaded" in cache_implementation)
        return EncoderDecoderCache(cache.self_attention_cache, cross)

    def _get_logits_processor(self, generation_config, *args, **kwargs):
        """transformers' processors for `generation_config`, then PageSum's `SummaryRules`."""
        processors = super()._get_logits_processor(generation_config, *args, **kwargs)
        processors.append(SummaryRules(self.config.bos_token_id, self.config.eos_token_id, self.config.pad_token_id,
                                       generation_config.max_length))
        return processors

    @torch.no_grad()
    def summary_page_weights(self, sequences: torch.LongTensor, input_ids: torch.LongTensor | None = None,
                             attention_mask: torch.Tensor | None = None,
                             encoder_outputs: PageSumEncoderOutput | None = None) -> torch.FloatTensor:
        """The page weights with which `generate()` chose every token of `sequences` (batch, 1 + steps), one
        summary per example as `generate()` returns them: (batch, steps, pages), 0 on missing pages and after a
        summary's `</s>`."""
        outputs = self(input_ids=input_ids, attention_mask=attention_mask, encoder_outputs=encoder_outputs,
                       decoder_input_ids=sequences[:, :-1], use_cache=False, output_page_weights=True)
        chosen = sequences[:, 1:].ne(self.config.pad_token_id)  # (batch, steps): padding is never chosen
        return outputs.page_weights.transpose(1, 2) * chosen[:, :, None]  # (batch, steps, pages)


def label_smoothed_loss(logits: torch.Tensor, labels: torch.LongTensor, epsilon: float, pad_token_id: int,
                        num_items: int | torch.Tensor | None = None) -> torch.Tensor:
    """fairseq's label-smoothed cross entropy (the paper's loss), summed over the target tokens and divided by their
    number (or `num_items`): the smoothing mass epsilon is spread over the vocabulary's other tokens.

    logits: (batch, tgt_len, vocab); labels: (batch, tgt_len), -100 or padding where there is no target."""
    target = scored_target(labels, pad_token_id)  # (batch, tgt_len)
    lprobs = logits.float().log_softmax(dim=-1)  # (batch, tgt_len, vocab)
    loss, _ = label_smoothed_nll_sums(lprobs.view(-1, lprobs.size(-1)), target.view(-1), epsilon, pad_token_id)
    return loss / target_count(target, pad_token_id, num_items)


def scored_target(labels: torch.LongTensor, pad_token_id: int) -> torch.LongTensor:
    """`labels` (batch, tgt_len) with padding where there is no target (-100 or padding)."""
    return labels.masked_fill(labels.eq(IGNORE_INDEX), pad_token_id)


def target_count(target: torch.LongTensor, pad_token_id: int, num_items: int | torch.Tensor | None) -> torch.Tensor:
    """What the summed loss is divided by: `num_items` (the Trainer's count), else the target's tokens."""
    return target.ne(pad_token_id).sum() if num_items is None else num_items


# ---- summaries ----------------------------------------------------------------------------------------------------

class SummaryRules(LogitsProcessor):
    """A summary is `<s> ... </s>`, as the training targets: its first token is `<s>`, which never comes again;
    padding never comes; at the length limit only `</s>` may come. A forced token keeps the model's log-probability
    (transformers' forced-token processors give it 0), so that a hypothesis scores as in the plugin's search and
    the length penalty ranks the same hypotheses."""

    def __init__(self, bos_token_id: int, eos_token_id: int, pad_token_id: int, max_length: int):
        self.bos_token_id, self.eos_token_id, self.pad_token_id = bos_token_id, eos_token_id, pad_token_id
        self.max_length = max_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        # input_ids: (hypotheses, cur_len), the decoder start first; scores: (hypotheses, vocab) log-probabilities
        cur_len = input_ids.shape[-1]
        if cur_len >= self.max_length - 1:
            return only(scores, self.eos_token_id)
        if cur_len == 1:
            return only(scores, self.bos_token_id)
        scores = scores.clone()
        scores[:, [self.bos_token_id, self.pad_token_id]] = -math.inf
        return scores


def only(scores: torch.FloatTensor, token: int) -> torch.FloatTensor:
    """(hypotheses, vocab) scores with every token but `token` at -inf, `token`'s unchanged."""
    kept = torch.full_like(scores, -math.inf)
    kept[:, token] = scores[:, token]
    return kept


def summary_lengths(min_summary_tokens: int, max_summary_tokens: int) -> dict:
    """The plugin's length settings (`--min-len`, `--max-len-b`: summary tokens, `<s>` and `</s>` left out) as
    `generate()`'s `min_length` and `max_length`, which also count the decoder start, `<s>` and (for the minimum)
    the `</s>` that may only come after `min_summary_tokens`."""
    return {"min_length": min_summary_tokens + 2, "max_length": max_summary_tokens + 3}


__all__ = ["PageSumForConditionalGeneration", "PageSumModel", "PageSumPreTrainedModel", "PageCache",
           "SummaryRules", "summary_lengths"]
