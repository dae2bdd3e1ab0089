"""The patient search (``patient=True``, ``--patient-search``): beam search that stops an example as
transformers 4.6's ``generate(early_stopping=False)`` does, the rule the PageSum authors decoded their test
sets with. An example keeps its ``beam`` best ended hypotheses, a later one replacing the worst when it
scores higher, and is done once that worst scores at least the step's best candidate normalised by the
step's length; fairseq's rule stops at the first ``beam`` ended hypotheses."""

import math

import pytest
import torch

from builders.models import build_tiny, log_probs, make_source_sensitive, paged_batch, random_pages, vocab
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator

pytestmark = pytest.mark.usefixtures("one_thread")

BEAM, LENPEN, MIN_LEN, MAX_LEN = 3, 2.0, 2, 30  # summary tokens, <s> and </s> left out


@pytest.fixture(scope="module")
def tiny(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir)
    return make_source_sensitive(model.eval(), task.dictionary), task.dictionary


@pytest.fixture(scope="module")
def batch(tiny):
    _, dictionary = tiny
    rng = torch.Generator().manual_seed(3)
    low, high = vocab(dictionary)
    return paged_batch([random_pages(rng, n, low, high) for n in (3, 1, 2, 3, 2, 1)], dictionary)


def search(model, dictionary, src, patient: bool, **settings):
    settings = {**dict(beam_size=BEAM, len_penalty=LENPEN, min_len=MIN_LEN, max_len_b=MAX_LEN, decoding="eager"),
                **settings}
    generator = PageSumSequenceGenerator([model], dictionary, patient=patient, **settings)
    sample = {"id": torch.arange(src.size(0)), "net_input": {"src_tokens": src, "src_lengths": src.ne(1).sum((1, 2))}}
    return generator.generate([model], sample)


@torch.no_grad()
def transformers_4_6_beam_search(model, dictionary, src, beam=BEAM, lenpen=LENPEN, min_len=MIN_LEN,
                                 max_len=MAX_LEN):
    """One example's beam search written from transformers 4.6's ``BeamSearchScorer`` and
    ``BeamHypotheses`` with ``early_stopping=False``, over full forward passes, with the plugin's
    summary rules (``<s>`` forced first and never again, ``</s>`` only after ``min_len`` summary
    tokens, only ``</s>`` after ``max_len``): [(score, tokens <s> ... </s>)], best first."""
    eos, bos, pad = dictionary.eos(), dictionary.bos(), dictionary.pad()
    running = [([eos], 0.0)]  # (tokens from the decoder's start, cumulative log-probability)
    kept = []  # (normalised score, tokens), at most ``beam``, in the order they were kept
    for step in range(max_len + 2):  # step 0 writes <s>; the summary's tokens follow; the last only </s>
        prev = torch.tensor([tokens for tokens, _ in running])  # (hypotheses, step + 1)
        lprobs = log_probs(model, src.expand(len(running), -1, -1), prev)[0][:, -1]  # (hypotheses, vocab)
        allowed = torch.zeros_like(lprobs, dtype=torch.bool)
        if step == 0:
            allowed[:, bos] = True
        elif step > max_len:
            allowed[:, eos] = True
        else:
            allowed[:] = True
            allowed[:, [pad, bos]] = False
            allowed[:, eos] = step > min_len
        scores = (torch.tensor([score for _, score in running])[:, None] + lprobs).masked_fill(~allowed, -math.inf)
        top, index = scores.view(-1).topk(2 * beam)  # the step's candidates, best first
        candidates = [(float(s), int(i) // lprobs.size(1), int(i) % lprobs.size(1)) for s, i in zip(top, index)]
        following = []
        for rank, (score, row, token) in enumerate(candidates):
            if score == -math.inf:
                break
            if token == eos:
                if rank < beam:  # an ended candidate counts among the best ``beam`` only
                    normalised = score / (step + 1) ** lenpen
                    if len(kept) < beam or normalised > min(s for s, _ in kept):
                        kept.append((normalised, running[row][0][1:] + [eos]))
                        if len(kept) > beam:
                            kept.pop(min(range(len(kept)), key=lambda k: kept[k][0]))
            elif len(following) < beam:
                following.append((running[row][0] + [token], score))
        best = candidates[0][0]
        if len(kept) >= beam and min(s for s, _ in kept) >= best / (step + 1) ** lenpen:
            break
        running = following
    return sorted(kept, key=lambda kept_hypothesis: -kept_hypothesis[0])


@pytest.mark.parametrize("lenpen", [LENPEN, 1.0])  # 2.0 favours length: here every search runs to the end
def test_each_example_finds_the_hypotheses_of_transformers_4_6_without_early_stopping(tiny, batch, lenpen):
    model, dictionary = tiny
    for i, hypos in enumerate(search(model, dictionary, batch, patient=True, len_penalty=lenpen)):
        src = batch[i: i + 1, : int(batch[i].ne(dictionary.pad()).any(-1).sum())]  # alone, its own pages
        expected = transformers_4_6_beam_search(model, dictionary, src, lenpen=lenpen)
        assert [h["tokens"].tolist() for h in hypos] == [tokens for _, tokens in expected]
        torch.testing.assert_close(torch.stack([h["score"] for h in hypos]),
                                   torch.tensor([score for score, _ in expected]), atol=1e-5, rtol=0)


def test_a_patient_search_keeps_the_best_of_what_the_first_beam_ended_ones_hold(tiny, batch):
    """Patience only ever replaces a kept hypothesis by a better one: every example's best is at
    least fairseq's, and on this batch some example finds a better, longer summary."""
    model, dictionary = tiny
    hasty, patient = search(model, dictionary, batch, patient=False), search(model, dictionary, batch, patient=True)
    best = [(float(h[0]["score"]), float(p[0]["score"])) for h, p in zip(hasty, patient)]
    assert all(p >= h for h, p in best)
    assert any(p > h for h, p in best), "patience changes no summary here: the case cannot tell"


def test_the_patient_search_runs_step_by_step_where_fixed_shapes_were_asked_for(tiny, batch, caplog):
    model, dictionary = tiny
    expected = search(model, dictionary, batch, patient=True)
    with caplog.at_level("WARNING"):
        found = search(model, dictionary, batch, patient=True, decoding="static")
    assert "the patient search" in caplog.text
    assert [h[0]["tokens"].tolist() for h in found] == [h[0]["tokens"].tolist() for h in expected]
