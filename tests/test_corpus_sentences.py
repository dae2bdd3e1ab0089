"""The offline sentence splitter: Punkt with an explicit abbreviation set."""

import json
import random

import pytest

from builders.corpora import PAPER_DIR, acl_papers
from pagesum_plugin.corpus import sentences
from pagesum_plugin.corpus.sentences import nltk_punkt, nltk_punkt_sentences, split_sentences


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


# --------------------------------------------------------------------------- NLTK's Punkt's sentences, exactly

# Text where Punkt's rules, its word tokens or its offsets are easy to get wrong.
HARD_CASES = {
    "abbreviations": "Smith et al. (2020) agree, e.g. here. Cf. Fig. 3, Figs. 4-5 and Eq. 2. I.e. no. The U.S. Army "
                     "and the U.K. won. Ph.D. students came at 5 p.m. Mr. Lee vs. Dr. No. Co-ed. team. non-Prof. X.",
    "initials": "J. R. R. Tolkien wrote it. A. the end. B. 5 is odd. C. (x) here. D. ; E. , É. Next. é. next. "
                "_. Next.",
    "numbers": "It costs 3.5 dollars. Step 2. then 3. Then 1.2.3. Next. -5. Next. ,5. Next. 3-4. Next. 2020. The end. "
               "Table 3. (a) shows it. 12. ; 13. 東 14.%",
    "ellipses": "It ends... Then more.. next. Wait . . . what? And .... so. x. . . y. Dots.. Then. End...",
    "quotes": 'He said "Stop." Then left. "Why?" she asked. \u201cGo.\u201d They went. \u2018So.\u2019 Yes. '
              "\u00abNon.\u00bb Fine. 'Quoted.' Next. x.' y. z.\u201d A.",
    "brackets": "(Sent one.) Sent two. [See 3.] Yes. {A.} B. (Smith, 2020). Next. f(x). Then [1]. Done (e.g. this).",
    "marks in a row": "Really?! Yes!! No?? Why.? Go.! Then!) so.) x!\" y?' Now?.. Oh!...",
    "punctuation after a period": "x. ; y. , z. ! w. ? v. : u. ) t. @ s. * end.",
    "the next token holds a mark": "Hi. A.B. Hi.(x) e.g. Hi.(x) No. e.g., Fig. 3.5.) Done. Co. Inc.? Yes. 5. ?? ok.",
    "paragraph breaks": "A title without period\n\nThe body.\n \nNext paragraph\n\t\n\nLast one. \n\n\n",
    "line breaks": "One line.\nNext line. Fig.\n3 shows.\r\nDone. e.g.\nthis. x.\n. . .\ny",
    "unusual whitespace": "A.\u00a0B. C.\u2009D. E.\x1cF. G.\tH.\u3000I. J.\x0bK. L.\x0cM. N.\u2028O. P.\x85Q.",
    "a long word before a period": "See " + "x" * 100 + ". Next. " + "y." * 50 + " Then. (" + "z" * 70 + "). Done.",
    "a text of one mark": ".",
    "leading whitespace": "   \n  Starts late. Ends early.   ",
    "unicode words": "Straße. Groß. 東京. 東. Ναι. Όχι. naïve. café. Ω. ω. ٣. Next. ² Next.",
    "dashes": "It -- no. -- Yes. --. Then -x. Go---. Now.",
}


@pytest.mark.parametrize("case", HARD_CASES)
def test_hard_cases_split_as_nltk_punkt(case):
    assert split_sentences(HARD_CASES[case]) == nltk_punkt_sentences(HARD_CASES[case])


HARD_TOKENS = (
    "A. a. 5. 3.5 No. no. e.g. U.S. x.. ... . . . ; , ? ! . The the 東 É. é _. (x) ##number##. ( ) \" ' "
    "\u201c \u201d \u00ab \u00bb \u2019 -- - Fig. al. J. 1. 2020). word.) x.' ?! !! .. a.b. Co-ed. -5. ,5. "
    "Hi.(x [ ] } x.\u2019 y.\u201d non-linear. 3-4. 3--4. I. i. Ph.D. vs. St. z! q? @ * :"
).split() + ["x" * 70 + "."]
SPACES = (" ", " ", " ", "", "\n", "  ", "\t", "\u00a0", "\n\n", " \n ", "\x1c", "\u2009", "\r\n")


def test_random_texts_of_hard_tokens_split_as_nltk_punkt():
    rng = random.Random(0)
    texts = ["".join(rng.choice(HARD_TOKENS) + rng.choice(SPACES) for _ in range(rng.randrange(1, 14)))
             for _ in range(4000)]
    assert [t for t in texts if split_sentences(t) != nltk_punkt_sentences(t)] == []


def _aclsum_paragraphs() -> list[str]:
    paragraphs = []
    for path in sorted(PAPER_DIR.glob("*.json")):
        paper = json.loads(path.read_text(encoding="utf-8"))
        paragraphs += [paper["abstract"]] + [p["text"] for p in paper["pdf_parse"]["body_text"]]
    return paragraphs


def test_every_aclsum_paragraph_splits_as_nltk_punkt():
    paragraphs = _aclsum_paragraphs()
    assert len(paragraphs) > 5000
    assert [p for p in paragraphs if split_sentences(p) != nltk_punkt_sentences(p)] == []


@pytest.mark.slow
def test_every_aclsum_paper_as_one_plain_text_splits_as_nltk_punkt():
    """Sections' paragraphs joined by line breaks, sections by blank lines: the jsonl text layout."""
    texts = ["\n\n".join(s["text"] for s in paper["sections"]) for paper in acl_papers(250)]
    assert [t for t in texts if split_sentences(t) != nltk_punkt_sentences(t)] == []


def test_the_context_decision_equals_punkts_on_every_candidate_context():
    words = "A. a. 5. 5 No. no. e.g. U.S. x.. ... ; , ? ! . The the 東 É. é _. (x) ##number##.".split()
    contexts = [f"{a} {b}" for a in words for b in words] + [f"{a}\n{b}" for a in words for b in words]
    reference = nltk_punkt()
    assert [c for c in contexts if sentences._context_breaks(c) != reference.text_contains_sentbreak(c)] == []
