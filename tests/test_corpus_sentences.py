"""The offline sentence splitter: Punkt with an explicit abbreviation set."""

import json

from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

from builders.corpora import PAPER_DIR, acl_papers
from pagesum_plugin.corpus import sentences
from pagesum_plugin.corpus.sentences import ABBREVIATIONS, split_sentences


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


# --------------------------------------------------------------------------- Punkt's decisions, taken directly

EDGE_CASES = [
    "J. Smith wrote it. A. 5 is odd. A. the end. See No. 5 here. In 3. The next. Step 2. then. Step 2. 3 more.",
    "x. ; y. , z. ! w. ? It ends... Then more.. next. U.S. Army. e.g. The. Fig. 3 shows it. et al. (2020) say so.",
    "Co-ed. Then. ##number##. Next. 1.2.3. Next. -5. Next. ,5. Next. _. Next. É. Next. é. next. 東. Next.",
    "(Sent one.) Sent two. \"Quoted.\" Next! Really? Yes.\nNew line. Tab.\tNext.   Many   spaces.",
]


def _nltk_punkt() -> PunktSentenceTokenizer:
    params = PunktParameters()
    params.abbrev_types = set(ABBREVIATIONS)
    return PunktSentenceTokenizer(params)


def test_the_direct_decision_splits_every_aclsum_paper_as_punkt_does():
    reference, ours = _nltk_punkt(), sentences._punkt()
    paragraphs = list(EDGE_CASES)
    for path in sorted(PAPER_DIR.glob("*.json")):
        paper = json.loads(path.read_text(encoding="utf-8"))
        paragraphs += [paper["abstract"]] + [p["text"] for p in paper["pdf_parse"]["body_text"]]
    assert len(paragraphs) > 5000
    different = [p for p in paragraphs if ours.tokenize(p) != reference.tokenize(p)]
    assert different == []


def test_the_direct_decision_equals_punkts_on_every_candidate_context():
    reference, ours = _nltk_punkt(), sentences._punkt()
    words = "A. a. 5. 5 No. no. e.g. U.S. x.. ... ; , ? ! . The the 東 É. é _. (x) ##number##.".split()
    contexts = [f"{a} {b}" for a in words for b in words] + [f"{a}\n{b}" for a in words for b in words]
    assert [c for c in contexts if ours.text_contains_sentbreak(c) != reference.text_contains_sentbreak(c)] == []
