"""The fast ROUGE path gives exactly rouge-score's numbers (stemmed R-1, R-2, rougeLsum)."""

import random

import numpy as np
import pytest
from rouge_score import rouge_scorer

from builders.corpora import acl_papers
from pagesum_plugin.evaluation import rouge
from pagesum_plugin.corpus.sentences import split_sentences

TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def reference_scorer():
    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)


def _lines(text):
    return "\n".join(split_sentences(text))


def _fuzz_text(rng, sentences, vocab=("the", "model", "models", "page", "pages", "a", "of", "reads", "reading", "7")):
    """Short sentences over a tiny vocabulary: many equal-length LCSs, so the
    backtrace's tie-breaking decides which tokens enter the union."""
    return "\n".join(" ".join(rng.choice(vocab) for _ in range(rng.randint(0, 9))) for _ in range(sentences))


# Cases where another LCS than rouge-score's, or another hit count, would change a score.
ADVERSARIAL_PAIRS = [
    # "model page" vs "page model": two LCSs of length 1; rouge-score's backtrace reads
    # out "model", which the second reference sentence also claims, so only one of the
    # hypothesis's tokens scores a hit (taking "page" would score two).
    ("model page\nmodel", "page model"),
    ("the the model the\nthe model model", "model the the\nthe\nmodel the model the"),  # repeated tokens
    ("page\nmodel\npage\nthe", "the\npage\npage"),  # one-word sentences
    ("!!!\nthe model reads\n--\n", "...\nmodel the reads\n?!"),  # sentences with no tokens
    ("!!! ???\n...", "the model"),  # a reference whose sentences all lack tokens
    ("a b a b a b\nb a b a", "b a b a b\na b\nb"),
    ("pages page paging\npaged", "page\npage page"),  # different words, one stem
]


@pytest.fixture(scope="module")
def fixture_pairs():
    """(reference, hypothesis) pairs covering real text and the awkward cases."""
    papers = acl_papers(6)
    pairs = []
    for paper in papers:  # real abstracts against real section text
        body = " ".join(s["text"] for s in paper["sections"])
        pairs.append((_lines(paper["summary"]), _lines(" ".join(body.split()[:250]))))
    long_body = " ".join(" ".join(s["text"] for s in papers[0]["sections"]).split()[:2500])
    long_other = " ".join(" ".join(s["text"] for s in papers[1]["sections"]).split()[:2500])
    pairs += [
        (_lines(long_body), _lines(long_other)),  # very long summaries
        (_lines(long_body), _lines(long_body[:4000])),
        ("Café naïve résumé — Zürich 東京 ünïcödé.\nΑθήνα and São Paulo 🙂 agree.", "Cafe naive resume in Zürich.\n東京 🙂"),
        ("Revenue rose 12.5% to $1,204 in 2019-2020.\nAbout 3.14 of 10,000 were 42nd.", "In 2019 revenue rose 12 %.\n10,000 items"),
        ("first sentence.\n\n\nsecond sentence after empty lines.\n", "\nsecond sentence.\n\nfirst sentence\n"),
        ("", "an empty reference"),
        ("an empty hypothesis", ""),
        ("   \n  ", "only whitespace reference"),
        ("!!! ??? ...\n--", "punctuation only reference"),
        ("the the the the", "the the"),
        ("Running runners ran; generously generalized generalizations.", "runner run generous generalization"),
    ]
    pairs += ADVERSARIAL_PAIRS
    rng = random.Random(7)
    pairs += [(_fuzz_text(rng, rng.randint(1, 6)), _fuzz_text(rng, rng.randint(1, 6))) for _ in range(120)]
    pairs += [(_fuzz_text(rng, rng.randint(1, 6), ("a", "b", "c")), _fuzz_text(rng, rng.randint(1, 6), ("a", "b", "c")))
              for _ in range(120)]
    return pairs


def test_tokenizer_equals_rouge_score_tokenizer(fixture_pairs, reference_scorer):
    for ref, hyp in fixture_pairs:
        for text in (ref, hyp):
            assert rouge.tokenize(text) == reference_scorer._tokenizer.tokenize(text)


def test_whole_text_tokens_are_the_sentences_tokens_in_order(fixture_pairs):
    # score_pair tokenizes each sentence once and joins them for rouge1, rouge2 and rougeL.
    for ref, hyp in fixture_pairs:
        for text in (ref, hyp):
            joined = [t for sentence in rouge.sentences_for_lsum(text) for t in rouge.tokenize(sentence)]
            assert joined == rouge.tokenize(text)


def test_rougeLsum_scores_the_union_tokens_that_rouge_scores_backtrace_chooses(reference_scorer):
    # Hypothesis "page model": one hit out of 2 hypothesis and 3 reference tokens.
    ours = rouge.score_pair("model page\nmodel", "page model")["rougeLsum"]
    assert ours == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
    assert ours == pytest.approx(reference_scorer.score("model page\nmodel", "page model")["rougeLsum"].fmeasure)


def test_fast_scores_equal_rouge_score_on_every_fixture_pair(fixture_pairs, reference_scorer):
    ours = rouge.score_examples([h for _, h in fixture_pairs], [[r] for r, _ in fixture_pairs], workers=1)
    for k, (ref, hyp) in enumerate(fixture_pairs):
        expected = reference_scorer.score(ref, hyp)
        for metric in rouge.METRICS:
            assert ours[metric][k] == pytest.approx(expected[metric].fmeasure, abs=TOLERANCE), (metric, ref, hyp)


def test_process_pool_gives_the_same_numbers_as_one_process(fixture_pairs, monkeypatch):
    monkeypatch.setattr(rouge, "MIN_EXAMPLES_PER_WORKER", {"fork": 8, "spawn": 8})  # a pool even for this few examples
    hyps, refs = [h for _, h in fixture_pairs], [[r] for r, _ in fixture_pairs]
    single = rouge.score_examples(hyps, refs, workers=1)
    pooled = rouge.score_examples(hyps, refs, workers=2)
    for metric in rouge.METRICS:
        np.testing.assert_array_equal(single[metric], pooled[metric])


def test_several_references_take_the_best_f1_like_score_multi(fixture_pairs, reference_scorer):
    for (ref_a, hyp), (ref_b, _) in zip(fixture_pairs[8:18], fixture_pairs[18:28]):
        expected = reference_scorer.score_multi([ref_a, ref_b], hyp)
        ours = rouge.score_multi([ref_a, ref_b], hyp)
        for metric in rouge.METRICS:
            assert ours[metric] == pytest.approx(expected[metric].fmeasure, abs=TOLERANCE)


def test_corpus_rouge_is_mean_f1_times_100_over_split_sentences(reference_scorer):
    papers = acl_papers(4, offset=10)
    refs = [p["summary"] for p in papers]
    hyps = [p["sections"][0]["text"] for p in papers]
    result = rouge.corpus_rouge(hyps, refs)
    assert set(result) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    for metric in rouge.METRICS:
        expected = np.mean([reference_scorer.score(_lines(r), _lines(h))[metric].fmeasure for r, h in zip(refs, hyps)])
        assert result[metric] == pytest.approx(100 * expected, abs=1e-4)


def test_sentence_splitting_changes_only_rougeLsum():
    text = "PageSum reads pages. It mixes them at each step. Locality helps."
    split = rouge.corpus_rouge([text], [text.replace(". ", " . ")])
    unsplit = rouge.corpus_rouge([text], [text.replace(". ", " . ")], split_sentences=False)
    assert all(split[m] == unsplit[m] for m in ("rouge1", "rouge2", "rougeL"))
    assert rouge.prepare(text).count("\n") == 2


def test_mismatched_numbers_of_hypotheses_and_references_are_refused():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        rouge.score_examples(["a", "b"], [["a"]])
