"""The generators' own search loop finds what fairseq's ``SequenceGenerator._generate`` finds
on the same generator, for every system and every search setting a user can reach: the
same hypotheses in the same order, the same scores, positional scores, page weights and
attention (bit for bit: the loop runs the same operations, only arranged so that a step
does not wait for the device)."""

import contextlib

import pytest
import torch
from fairseq import search
from fairseq.token_generation_constraints import pack_constraints

from builders.models import bart_twin, build_tiny, make_source_sensitive, vocab
from builders.systems import BEAM_SETTINGS, SEARCHED_SYSTEMS, build_system
from benchmarks.reference.search import fairseq_loop

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one CPU thread

COUNTS = (3, 1, 4, 2, 1)  # pages, documents or segments of each example of a batch


@pytest.fixture(scope="module", params=SEARCHED_SYSTEMS)
def system(request, copy_task_dir):
    return build_system(request.param, copy_task_dir)


@pytest.fixture(scope="module")
def pagesum(copy_task_dir):
    return build_system("pagesum", copy_task_dir)


def both_loops(generator, sample, seed=None, **kwargs):
    """(the generator's own search, fairseq's loop on the same generator) of ``sample``; the
    random generator is seeded with ``seed`` before each, for sampling.

    Both follow a first search of the same sample by the same generator: a tiny HEPOS, HED or
    AWESOME model rounds its first search of a new shape differently from the next ones, by
    up to 1e-5, whichever loop runs it (fairseq's loop against itself shows it too)."""
    runs = []
    for loop in (contextlib.nullcontext(generator), contextlib.nullcontext(generator), fairseq_loop(generator)):
        if seed is not None:
            torch.manual_seed(seed)
        with loop:
            runs.append(generator.generate(generator.model.models, sample, **kwargs))
    return runs[1:]


def assert_identical(ours, reference):
    """The same hypotheses in the same order, with the same scores, positional scores, page
    weights and attention, bit for bit."""
    for ours_hypos, ref_hypos in zip(ours, reference, strict=True):
        assert len(ours_hypos) == len(ref_hypos)
        for h, r in zip(ours_hypos, ref_hypos):
            for key in ("tokens", "score", "positional_scores", "page_weights", "attention"):
                assert (h[key] is None) == (r[key] is None), key
                assert h[key] is None or torch.equal(h[key], r[key]), key


def assert_searches_agree(generator, sample, seed=None, **kwargs):
    ours, reference = both_loops(generator, sample, seed, **kwargs)
    assert_identical(ours, reference)
    return ours


@pytest.mark.parametrize("settings", BEAM_SETTINGS.values(), ids=BEAM_SETTINGS.keys())
def test_beam_search_equals_fairseqs_loop(system, settings):
    assert_searches_agree(system.generator(**settings), system.make_sample(COUNTS, seed=1))


def test_the_beam_settings_end_beams_at_different_steps_and_drop_finished_examples(pagesum):
    hypos = assert_searches_agree(pagesum.generator(**BEAM_SETTINGS["beams-end-apart"]),
                                  pagesum.make_sample(COUNTS, seed=1))
    lengths = [[len(h["tokens"]) for h in n_best] for n_best in hypos]
    assert any(len(set(n_best)) > 1 for n_best in lengths), "beams of one example ended at different steps"
    assert len({max(n_best) for n_best in lengths}) > 1, "examples ended at different steps and were dropped"


def test_the_length_settings_bind(pagesum):
    """The min-len setting keeps every summary at 12 tokens or more, and the max-len setting
    stops some at its 4 (the forced <s> and </s> come on top)."""
    sample = pagesum.make_sample(COUNTS, seed=1)
    at_least = assert_searches_agree(pagesum.generator(**BEAM_SETTINGS["min-len"]), sample)
    assert min(len(h["tokens"]) for n_best in at_least for h in n_best) >= 12 + 2
    capped = assert_searches_agree(pagesum.generator(**BEAM_SETTINGS["max-len-reached"]), sample)
    assert max(len(h["tokens"]) for n_best in capped for h in n_best) == 4 + 2


@pytest.mark.parametrize("strategy", [
    lambda d: search.Sampling(d, sampling_topk=8),
    lambda d: search.Sampling(d, sampling_topp=0.9),
    lambda d: search.Sampling(d),
], ids=["top-k", "top-p", "full"])
def test_sampling_with_a_fixed_seed_equals_fairseqs_loop(system, strategy):
    generator = system.generator(beam_size=3, max_len_b=20, search_strategy=strategy(system.task.dictionary))
    assert_searches_agree(generator, system.make_sample(COUNTS, seed=2), seed=5)


def test_diverse_beam_search_equals_fairseqs_loop(system):
    strategy = search.DiverseBeamSearch(system.task.dictionary, num_groups=2, diversity_strength=0.5)
    assert_searches_agree(system.generator(beam_size=4, max_len_b=20, search_strategy=strategy),
                          system.make_sample(COUNTS, seed=3))


def test_diverse_siblings_search_equals_fairseqs_loop(system):
    strategy = search.DiverseSiblingsSearch(system.task.dictionary, diversity_rate=0.5)
    assert_searches_agree(system.generator(beam_size=3, max_len_b=20, search_strategy=strategy),
                          system.make_sample(COUNTS, seed=4))


def test_suppressed_tokens_equal_fairseqs_loop(system):
    dictionary = system.task.dictionary
    low, high = vocab(dictionary)
    words = tuple(dictionary[i] for i in range(low, low + 10))
    assert_searches_agree(system.generator(beam_size=3, max_len_b=20, tokens_to_suppress=words),
                          system.make_sample(COUNTS, seed=6))


def test_the_unknown_word_penalty_equals_fairseqs_loop_and_binds(pagesum):
    """A negative penalty is a bonus: every summary is then made of <unk>."""
    unk = pagesum.task.dictionary.unk()
    hypos = assert_searches_agree(pagesum.generator(beam_size=3, max_len_b=8, unk_penalty=-20.0),
                                  pagesum.make_sample(COUNTS, seed=6))
    assert all(set(h["tokens"][1:-1].tolist()) == {unk} for n_best in hypos for h in n_best)  # after the forced <s>


def test_top_pages_equals_fairseqs_loop(pagesum):
    assert_searches_agree(pagesum.generator(beam_size=3, max_len_b=20, top_pages=2), pagesum.make_sample(COUNTS, 7))


@pytest.mark.parametrize("name", ["pagesum", "hepos", "hed"])
def test_prefix_tokens_of_different_lengths_equal_fairseqs_loop(name, copy_task_dir):
    built = build_system(name, copy_task_dir)
    dictionary = built.task.dictionary
    low, _ = vocab(dictionary)
    prefix = torch.full((len(COUNTS), 3), dictionary.pad())  # <s> then 0, 1 or 2 words
    prefix[:, 0] = dictionary.bos()
    for row in range(len(COUNTS)):
        prefix[row, 1 : 1 + row % 3] = low + row
    assert_searches_agree(built.generator(beam_size=3, max_len_b=15), built.make_sample(COUNTS, seed=8),
                          prefix_tokens=prefix)


def test_source_length_matching_equals_fairseqs_loop(pagesum):
    strategy = search.LengthConstrainedBeamSearch(pagesum.task.dictionary, min_len_a=1, min_len_b=0, max_len_a=1,
                                                  max_len_b=0)
    generator = pagesum.generator(beam_size=3, match_source_len=True, search_strategy=strategy)
    assert_searches_agree(generator, pagesum.make_sample((2, 1, 3), seed=9))


def test_prefix_constrained_search_equals_fairseqs_loop(pagesum):
    low, high = vocab(pagesum.task.dictionary)
    dictionary = pagesum.task.dictionary
    allowed = [dictionary.bos(), dictionary.eos(), *range(low, low + (high - low) // 2)]
    strategy = search.PrefixConstrainedBeamSearch(dictionary, lambda example, tokens: allowed)
    hypos = assert_searches_agree(pagesum.generator(beam_size=3, max_len_b=15, search_strategy=strategy),
                                  pagesum.make_sample(COUNTS, seed=10))
    assert all(set(h["tokens"].tolist()) <= set(allowed) for n_best in hypos for h in n_best)


def test_lexical_constraints_equal_fairseqs_loop(pagesum):
    low, _ = vocab(pagesum.task.dictionary)
    constraints = pack_constraints([[torch.tensor([low + i, low + i + 1])] for i in range(len(COUNTS))])
    strategy = search.LexicallyConstrainedBeamSearch(pagesum.task.dictionary, "ordered")
    generator = pagesum.generator(beam_size=3, max_len_b=20, search_strategy=strategy)
    hypos = assert_searches_agree(generator, pagesum.make_sample(COUNTS, seed=11), constraints=constraints)
    for i, n_best in enumerate(hypos):  # the constraint is in the best hypothesis
        tokens = n_best[0]["tokens"].tolist()
        assert any(tokens[j : j + 2] == [low + i, low + i + 1] for j in range(len(tokens) - 1))


def test_language_model_fusion_equals_fairseqs_loop(pagesum, copy_task_dir):
    args, task, other = build_tiny(copy_task_dir, seed=3)
    language_model = bart_twin(args, task, other).decoder  # a decoder read without a source: a language model
    generator = pagesum.generator(beam_size=3, max_len_b=15, lm_model=language_model, lm_weight=0.5)
    assert_searches_agree(generator, pagesum.make_sample(COUNTS, seed=12))


def test_an_ensemble_equals_fairseqs_loop(pagesum, copy_task_dir):
    _, task, other = build_tiny(copy_task_dir, seed=4)
    generator = pagesum.generator(models=[pagesum.model, make_source_sensitive(other, task.dictionary, seed=1)],
                                  beam_size=3, max_len_b=15, no_repeat_ngram_size=2)
    assert_searches_agree(generator, pagesum.make_sample(COUNTS, seed=13))


def test_batched_decoding_equals_one_example_at_a_time(system):
    generator = system.generator(beam_size=3, max_len_b=20, no_repeat_ngram_size=3)
    batched = generator.generate([system.model], system.make_sample(COUNTS, seed=14))
    for i, n_best in enumerate(batched):
        sample = system.make_sample(COUNTS, seed=14)
        alone = generator.generate([system.model], slice_sample(sample, i, system.task.dictionary.pad()))[0]
        assert [h["tokens"].tolist() for h in n_best] == [h["tokens"].tolist() for h in alone]
        for h, a in zip(n_best, alone):
            torch.testing.assert_close(h["positional_scores"], a["positional_scores"], atol=1e-5, rtol=0)
            if h["page_weights"] is not None:
                torch.testing.assert_close(h["page_weights"], a["page_weights"], atol=1e-5, rtol=0)


def slice_sample(sample, i, pad):
    """Example ``i`` of a batch, alone, with its padding cut as a batch of one would have it."""
    src = sample["net_input"]["src_tokens"][i : i + 1]  # (1, pages, len)
    real_pages = int(src.ne(pad).any(dim=2).sum())
    src = src[:, :real_pages, : int(src.ne(pad).sum(dim=2).max())]
    return {"id": sample["id"][i : i + 1], "net_input": {"src_tokens": src, "src_lengths": src.ne(pad).sum((1, 2))}}


def test_a_minimum_length_above_the_maximum_is_refused_in_one_line(pagesum):
    with pytest.raises(ValueError, match=r"^--min-len 10 is above the longest summary this search allows, 5 tokens"):
        pagesum.generator(beam_size=2, min_len=10, max_len_b=5).generate([pagesum.model], pagesum.make_sample((1,), 0))
