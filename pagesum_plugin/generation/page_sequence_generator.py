"""Page-combined beam search (Eq. 9 of the PageSum paper at every decoding step).

The search is fairseq's, run by the plugin's own step loop (``generation/search_loop.py``:
the same hypotheses and scores, with one host sync a step): the PageSum decoder already
turns the (example x beam) rows it is given into one row per page of every beam, mixes
the page states and returns one distribution per beam row, and it moves every page's
cached state whenever beams are reordered or finished examples are pruned. This
generator adds what summarization with PageSum needs on top:

* the summary always starts with <s> (the training convention), and <s> can never
  come again after it, in beam search and sampling alike;
* lengths count summary tokens: ``--min-len``/``--max-len-b`` leave the forced <s>
  out, and ``--max-len-a`` multiplies the example's source tokens (all its pages);
* --no-repeat-ngram-size blocks repeats on CPU as well as on CUDA;
* every hypothesis of a page-mixing model carries its per-step page weights (steps x
  pages); other systems decode with the same rules and ``page_weights`` None;
* optionally, only the k most confident pages are decoded (``top_pages``); their
  encoder output is taken from the pass that scored them, not computed again;
* on CUDA, every step after the first runs as one captured CUDA graph, the search's shapes
  fixed (``generation/static_search.py``); ``decoding="eager"`` (``--eager-decoding``) runs
  the step loop instead, as a search that fixed shapes cannot express does, saying why;
* optionally (``compile_decoder``), every decoder layer runs compiled by ``torch.compile``,
  all layers sharing their graphs (``modules/compiled_layers.py``);
* the model is told the beam size for every search, beam 1 included, so that a
  PageSum model keeps one copy of each page's encoder output per example, never per beam,
  and the search's length, to which the decoder preallocates its self-attention cache.

What it asks of a model is ``generation/contract.py``'s ``SummaryModel``, checked when the
generator is built: a model that cannot prune its pages is refused ``top_pages`` there.
"""

import logging
from typing import Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from ..errors import SettingError
from ..modules.decoder_self_attention import set_cache_beams, set_cache_length
from ..modules.page_mixing import real_pages
from ..modules.compiled_layers import compile_decoder_layers
from .contract import check_models
from .ngram_blocking import NoRepeatNGramBlocker
from .search_loop import SearchLoop
from .static_search import FixedShapeSearch, KeptSearches, StepRunner, refusal

logger = logging.getLogger(__name__)
DECODING_CHOICES = ("auto", "eager", "static", "graph", "fused")


class PageSumSequenceGenerator(SearchLoop):
    def __init__(self, models, tgt_dict, top_pages: int = 0, compile_decoder: Union[bool, str, Callable] = False,
                 decoding: StepRunner = "auto", patient: bool = False, **kwargs):
        """``decoding``: how the steps run. "auto": one captured CUDA graph per step on CUDA, the
        step loop elsewhere; "eager": the step loop; "static": the fixed shapes, op by op;
        "graph": the fixed shapes, captured; "fused": the fixed-shape step compiled whole by
        inductor, then captured on CUDA; or a callable that compiles the fixed-shape step.
        ``patient``: stop each example as transformers' ``early_stopping=False`` does, as the
        PageSum authors decoded their test sets (``search_loop.Patience``), in the step loop."""
        check_models(models, top_pages)
        if not callable(decoding) and decoding not in DECODING_CHOICES:
            raise ValueError(f"decoding={decoding!r}: not one of {', '.join(DECODING_CHOICES)}, nor a callable")
        self.decoding = decoding
        self._said = set()  # the reasons to decode step by step already given
        self._kept = KeptSearches()  # the captured steps of the last searches, for later ones of the same shapes
        if compile_decoder:  # True: torch.compile's default backend; a name or a callable: that backend
            for model in models:
                compile_decoder_layers(model, "inductor" if compile_decoder is True else compile_decoder)
        # fairseq suppresses these tokens at every step after the prefix (the forced <s>)
        kwargs["tokens_to_suppress"] = tuple(kwargs.get("tokens_to_suppress") or ()) + (tgt_dict[tgt_dict.bos()],)
        super().__init__(models, tgt_dict, **kwargs)
        if self.beam_size == 1:  # fairseq tells the models only about beams larger than 1
            for model in self.model.models:
                model.set_beam_size(1)
        self.top_pages = top_pages
        self.patient = patient
        if self.repeat_ngram_blocker is not None:
            self.repeat_ngram_blocker = NoRepeatNGramBlocker(self.repeat_ngram_blocker.no_repeat_ngram_size)
        self.bos = tgt_dict.bos()
        self.symbols_to_strip_from_output = self.symbols_to_strip_from_output | {self.bos}

    @torch.no_grad()
    def _generate(self, sample: Dict[str, Dict[str, Tensor]], prefix_tokens: Optional[Tensor] = None,
                  constraints: Optional[Tensor] = None, bos_token: Optional[int] = None):
        src_tokens = sample["net_input"]["src_tokens"]  # (batch, max_pages, page_len)
        if prefix_tokens is None:
            # Targets are "<s> summary </s>", so the first generated token is always <s>.
            prefix_tokens = src_tokens.new_full((src_tokens.size(0), 1), self.bos)
        page_counts = real_pages(src_tokens, self.pad).sum(dim=1).tolist()  # (batch,), read back once
        kept_pages = None
        mixes_pages = self.model.single_model.mixes_pages
        if 0 < self.top_pages < src_tokens.size(1):  # the model can prune: checked when the generator was built
            kept_pages, encoder_out = self._most_confident_pages(src_tokens, self.top_pages)  # (batch, k)
            pruned = src_tokens.gather(1, kept_pages[:, :, None].expand(-1, -1, src_tokens.size(2)))
            net_input = {**sample["net_input"], "src_tokens": pruned, "encoder_out": encoder_out}
            sample = {**sample, "net_input": net_input}
        finalized = self._generate_counting_summary_tokens(sample, prefix_tokens, constraints, bos_token)

        for i, hypos in enumerate(finalized):
            num_pages = page_counts[i]
            for hypo in hypos:
                if not mixes_pages:  # a model without page weights (a single-sequence rival)
                    hypo["page_weights"] = None
                    continue
                # "attention" holds the page weights: (max_pages, steps) -> (steps, pages)
                weights = hypo["attention"].t().float()
                if kept_pages is not None:  # scatter back to the document's page numbering
                    full = weights.new_zeros(weights.size(0), src_tokens.size(1))
                    full[:, kept_pages[i]] = weights[:, : kept_pages.size(1)]
                    weights = full
                hypo["page_weights"] = weights[:, :num_pages]
        return finalized

    def _generate_counting_summary_tokens(self, sample, prefix_tokens, constraints, bos_token):
        """The search with lengths in summary tokens: one more step for the forced <s>,
        and the length budget ``a * source tokens + b`` of the longest example in the batch."""
        src_tokens = sample["net_input"]["src_tokens"]  # (batch, max_pages, page_len)
        source_tokens = int(src_tokens.ne(self.pad).sum(dim=(1, 2)).max()) if self.max_len_a else 0
        settings = (self.max_len_a, self.max_len_b, self.min_len)
        budget = int(settings[0] * source_tokens + settings[1])  # summary tokens
        longest = min(budget, self.max_len - 2)
        if self.min_len > longest and not self.match_source_len:
            raise SettingError(f"--min-len {self.min_len} is above the longest summary this search allows, {longest} "
                               f"tokens (--max-len-a {settings[0]} --max-len-b {settings[1]}, and the decoder's "
                               f"{self.max_len} positions): lower --min-len or raise --max-len-b")
        self.max_len_a = 0
        self.max_len_b = budget + 1
        self.min_len = settings[2] + 1
        # the decoder runs one step per output position: at most max_len + 1 of them; its rows come
        # in blocks of beams (told at every search: the last one's end forgot them)
        for model in self.model.models:
            set_cache_length(model, min(self.max_len_b, self.max_len - 1) + 2)
            set_cache_beams(model, self.beam_size)
        try:
            return super()._generate(sample, prefix_tokens, constraints, bos_token)
        finally:
            self.max_len_a, self.max_len_b, self.min_len = settings
            for model in self.model.models:  # the next search's caller tells its own beams
                set_cache_beams(model, None)

    def _search(self, sample, prefix_tokens=None, constraints=None, bos_token=None):
        runner = self._fixed_shapes(sample, prefix_tokens, constraints)
        if runner is None:
            return super()._search(sample, prefix_tokens, constraints, bos_token)
        return FixedShapeSearch(self, runner, self._kept)(sample, prefix_tokens, bos_token)

    def _fixed_shapes(self, sample, prefix_tokens, constraints) -> Optional[StepRunner]:
        """How this search's steps run with fixed shapes, or None for the step loop; a search
        asked for fixed shapes that it cannot have says why, in one line."""
        on_cuda = sample["net_input"]["src_tokens"].is_cuda
        runner = ("graph" if on_cuda else "eager") if self.decoding == "auto" else self.decoding
        if runner == "eager":
            return None
        reason = refusal(self, sample, prefix_tokens, constraints)
        if reason is None and runner == "graph" and not on_cuda:
            reason = "CUDA graphs need the search on a CUDA device"
        if reason is not None:
            if reason not in self._said:  # once per generator and reason, not once per batch
                self._said.add(reason)
                log = logger.info if self.decoding == "auto" else logger.warning
                log("decoding step by step, not as one graph per step: %s", reason)
            return None
        return runner

    def _most_confident_pages(self, src_tokens: Tensor, k: int) -> Tuple[Tensor, Dict[str, List[Tensor]]]:
        """Score pages by their mean weight over the first two summary positions
        (the forced <s> and the first word) and keep the k best, in document order.
        Returns their page numbers (batch, k) and their rows of the encoder output."""
        model = self.model.single_model
        encoder_out = model.encoder(src_tokens)
        prefix = src_tokens.new_tensor([[self.eos, self.bos]]).expand(src_tokens.size(0), 2)  # (batch, 2)
        _, extra = model.decoder(prefix, encoder_out=encoder_out, features_only=True)
        scores = extra["page_weights"].mean(dim=2)  # (batch, max_pages), 0 for missing pages
        kept = scores.topk(k, dim=1).indices.sort(dim=1).values  # (batch, k)
        return kept, model.keep_pages(encoder_out, kept)
