"""The offline sentence splitter: Punkt with an explicit abbreviation set."""

from builders.corpora import acl_papers
from pagesum_plugin.corpus.sentences import split_sentences


def test_abbreviations_do_not_end_sentences():
    text = ("Smith et al. (2020) report gains, e.g. on arXiv, i.e. long papers. "
            "The U.S. Army agreed. See Fig. 3 and Eq. 2 in Sec. 4. Dr. Lee vs. Prof. Kim won.")
    assert split_sentences(text) == [
        "Smith et al. (2020) report gains, e.g. on arXiv, i.e. long papers.",
        "The U.S. Army agreed.",
        "See Fig. 3 and Eq. 2 in Sec. 4.",
        "Dr. Lee vs. Prof. Kim won.",
    ]


def test_sentence_final_punctuation_and_decimals():
    assert split_sentences("It costs 3.5 dollars. Really? Yes! Done.") == [
        "It costs 3.5 dollars.", "Really?", "Yes!", "Done."]


def test_blank_lines_are_boundaries_and_whitespace_is_collapsed():
    assert split_sentences("A title without period\n\n  The body\n continues here.  ") == [
        "A title without period", "The body continues here."]


def test_empty_text_has_no_sentences():
    assert split_sentences("") == []
    assert split_sentences(" \n\n \t") == []


def test_real_paper_text_loses_no_words():
    text = "\n\n".join(s["text"] for s in acl_papers(2)[1]["sections"])
    sentences = split_sentences(text)
    assert len(sentences) > 20
    assert " ".join(sentences).split() == text.split()
