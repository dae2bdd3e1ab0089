"""The bit-parallel LCS gives rouge-score's LCS lengths and, position for position,
the union LCS that rouge-score's backtrace reads out."""

import random

import pytest
from rouge_score import rouge_scorer

from pagesum_plugin.evaluation.lcs import UnionLcs, lcs_length


def rouge_score_union(reference, hypothesis_sentences):
    """Reference positions in rouge-score's union LCS (its ``_union_lcs`` before the token lookup)."""
    return rouge_scorer._find_union([rouge_scorer.lcs_ind(reference, c) for c in hypothesis_sentences])


def random_sentence(rng, vocab_size, max_length):
    return [rng.randrange(vocab_size) for _ in range(rng.randint(0, max_length))]


@pytest.fixture(scope="module")
def tie_heavy_cases():
    """(reference, hypothesis sentences) over 1 to 4 token types: repeated tokens and many
    equally long LCSs, so any other tie-breaking than rouge-score's shows."""
    rng = random.Random(11)
    cases = []
    for _ in range(3000):
        vocab = rng.randint(1, 4)
        reference = random_sentence(rng, vocab, 10)
        hypothesis = [random_sentence(rng, vocab, 10) for _ in range(rng.randint(1, 5))]
        cases.append((reference, hypothesis))
    return cases


@pytest.fixture(scope="module")
def long_cases():
    """Longer sentences, many of them: layouts that cross many bytes and bit-length boundaries."""
    rng = random.Random(12)
    cases = []
    for _ in range(60):
        vocab = rng.choice([2, 5, 40])
        reference = random_sentence(rng, vocab, 50)
        hypothesis = [random_sentence(rng, vocab, 50) for _ in range(rng.randint(1, 30))]
        cases.append((reference, hypothesis))
    return cases


def test_lcs_length_equals_the_last_cell_of_rouge_scores_table(tie_heavy_cases, long_cases):
    for reference, hypothesis in tie_heavy_cases[:1000] + long_cases:
        text = [t for sentence in hypothesis for t in sentence]
        assert lcs_length(reference, text) == rouge_scorer._lcs_table(reference, text)[-1][-1]


def test_lcs_length_of_an_empty_sequence_is_zero():
    assert lcs_length([], ["a", "b"]) == 0
    assert lcs_length(["a", "b"], []) == 0


def test_lcs_length_works_on_string_tokens():
    assert lcs_length("the model reads the page".split(), "a model reads a page".split()) == 3


def test_union_equals_rouge_scores_union_on_tie_heavy_sentences(tie_heavy_cases):
    for reference, hypothesis in tie_heavy_cases:
        assert sorted(UnionLcs(hypothesis).positions(reference)) == rouge_score_union(reference, hypothesis)


def test_union_equals_rouge_scores_union_on_long_sentences(long_cases):
    for reference, hypothesis in long_cases:
        assert sorted(UnionLcs(hypothesis).positions(reference)) == rouge_score_union(reference, hypothesis)


def test_union_takes_the_lcs_that_rouge_scores_backtrace_prefers_among_equally_long_ones():
    # "page model" and "model page" share two LCSs of length 1; the backtrace prefers
    # going up over going left on a tie, so it reads out "model" (position 0), not "page".
    assert UnionLcs([["page", "model"]]).positions(["model", "page"]) == [0]
    assert rouge_score_union(["model", "page"], [["page", "model"]]) == [0]


def test_union_is_one_union_over_all_hypothesis_sentences():
    union = UnionLcs([["model", "x"], ["y", "page"]])
    assert sorted(union.positions(["model", "reads", "page"])) == [0, 2]


def test_positions_are_listed_from_last_to_first():
    assert UnionLcs([["a", "b", "c"]]).positions(["a", "b", "c"]) == [2, 1, 0]


def test_empty_and_one_word_hypothesis_sentences_are_handled():
    union = UnionLcs([[], ["b"], [], ["a"], []])
    assert sorted(union.positions(["a", "b", "a"])) == rouge_score_union(["a", "b", "a"], [[], ["b"], [], ["a"], []])


def test_an_empty_reference_or_hypothesis_has_an_empty_union():
    assert UnionLcs([["a"]]).positions([]) == []
    assert UnionLcs([]).positions(["a"]) == []
    assert UnionLcs([[]]).positions(["a"]) == []


def test_a_reference_sharing_no_token_has_an_empty_union():
    assert UnionLcs([["a", "b"], ["c"]]).positions(["x", "y", "z"]) == []


def test_one_union_lcs_answers_many_references_independently():
    hypothesis = [["a", "b", "a"], ["b", "b"]]
    union = UnionLcs(hypothesis)
    for reference in (["b", "a"], ["a", "a", "b", "b"], ["b"], ["a", "b", "a", "b", "a"]):
        assert sorted(union.positions(reference)) == rouge_score_union(reference, hypothesis)
