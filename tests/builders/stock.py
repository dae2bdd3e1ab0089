"""fairseq's own ``SequenceGenerator`` on plain BART: the reference that every model's
decoding is held to where it reduces to BART (one page, one document, one segment, a
HEPOS stride of 1)."""

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

# beam sizes, length penalties, minimum lengths and n-gram blocking, each against the stock search
SEARCH_SETTINGS = [
    dict(beam_size=1, max_len_b=12),
    dict(beam_size=4, max_len_b=12),
    dict(beam_size=4, len_penalty=2.0, min_len=6, max_len_b=10),
    dict(beam_size=4, len_penalty=0.5, max_len_b=14, no_repeat_ngram_size=2),
    dict(beam_size=3, min_len=3, max_len_b=9, no_repeat_ngram_size=3),
]
over_search_settings = pytest.mark.parametrize(
    "settings", SEARCH_SETTINGS, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))


class HistoryNGramBlocker(torch.nn.Module):
    """fairseq's own Python n-gram blocker, given only the tokens generated so far (what its
    CUDA kernel sees) instead of the whole padded buffer."""

    def __init__(self, stock):
        super().__init__()
        self.stock = stock

    def forward(self, tokens, lprobs, bsz, beam_size, step):
        return self.stock._no_repeat_ngram(tokens[:, : step + 1], lprobs, bsz, beam_size, step)


def stock_generate(bart, dictionary, src_tokens: torch.Tensor, settings: dict):
    """fairseq's stock beam search of ``bart`` over (batch, src_len) ``src_tokens``, in this
    project's terms: lengths count summary tokens (the forced ``<s>`` is not one), ``<s>``
    never comes again, and it is forced first, as BART's hub interface does."""
    in_stock_terms = {**settings, "min_len": settings.get("min_len", 1) + 1, "max_len_b": settings["max_len_b"] + 1}
    stock = SequenceGenerator([bart], dictionary, tokens_to_suppress=("<s>",), **in_stock_terms)
    if stock.repeat_ngram_blocker is not None:
        stock.repeat_ngram_blocker = HistoryNGramBlocker(stock.repeat_ngram_blocker)
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_tokens.ne(dictionary.pad()).sum(1)}}
    bos_prefix = src_tokens.new_full((src_tokens.size(0), 1), dictionary.bos())
    return stock.generate([bart], sample, prefix_tokens=bos_prefix)


def assert_same_hypotheses(ours, reference, atol: float = 1e-5, page_weights: bool = False) -> None:
    """The same hypotheses in the same order: tokens exactly, scores (and, with ``page_weights``,
    the page weights of both or of neither) to ``atol``."""
    for ours_hypos, ref_hypos in zip(ours, reference, strict=True):
        assert len(ours_hypos) == len(ref_hypos)
        for h, r in zip(ours_hypos, ref_hypos):
            assert torch.equal(h["tokens"], r["tokens"])
            torch.testing.assert_close(h["score"], r["score"], atol=atol, rtol=0)
            torch.testing.assert_close(h["positional_scores"], r["positional_scores"], atol=atol, rtol=0)
            if page_weights:
                assert (h["page_weights"] is None) == (r["page_weights"] is None)
                if h["page_weights"] is not None:
                    torch.testing.assert_close(h["page_weights"], r["page_weights"], atol=atol, rtol=0)
