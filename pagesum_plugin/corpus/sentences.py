"""Offline sentence splitting.

NLTK's trained ``punkt`` models cannot be downloaded in every environment, and
``pysbd`` is accurate but far too slow for corpora such as arXiv (hundreds of thousands of
8,000-token documents). An *untrained* Punkt tokenizer is fast but breaks after every
abbreviation ("et al.", "e.g.", "U.S."). Punkt's decision rules accept an explicit set
of abbreviation types, so we give it the abbreviations that are frequent in scientific,
governmental and news text. That keeps Punkt's speed and fixes its common errors.

Paragraph breaks (blank lines) are always sentence boundaries: Punkt itself treats all
whitespace alike.

NLTK's Punkt builds a string context for every candidate break (a period, question or
exclamation mark before a space or a punctuation mark), tokenizes it and annotates its tokens
in two passes, through generators and one object per token. Here each paragraph is scanned once
with Punkt's own candidate pattern, Punkt's sentence spans and its realignment of closing marks
are kept as integer offsets, and each candidate is decided directly. Without trained
orthographic statistics, collocations or sentence starters, Punkt's second pass can only take
back a break after an initial or a number, so:

- a question or exclamation mark ends a sentence, and so does a period after nothing or after a
  punctuation mark that ends a word (a bracket, a quote);
- a period after a word that makes one token with it (word characters with single inner
  periods or hyphens) ends a sentence unless the word is an abbreviation, or a number or an
  initial before a lower-case or punctuation token (an initial: or a capitalised one). When it
  does not, a later token of the next one could still end a sentence: only when that token
  holds a sentence mark before its end is the context read as below;
- anything else (chains of marks, ellipses, words with other characters) is decided from the
  word tokens of Punkt's own context (``_context_breaks``).

Every pattern is Punkt's own or built from Punkt's character classes, matched on the same
engine (``regex``) without the per-call timeout that NLTK adds against caller-supplied
patterns. The sentences are NLTK's Punkt's with the same parameters (tested on every aclsum
paper and on hard cases), for about a tenth of its CPU time.
"""

import re
import string
from functools import lru_cache

import regex
from nltk.tokenize.punkt import PunktLanguageVars, PunktParameters, PunktSentenceTokenizer, PunktToken

# Lower-case, without the final period, as Punkt stores them. Multi-period
# abbreviations keep their inner periods ("e.g", "u.s").
ABBREVIATIONS = frozenset(
    """
    al approx assoc avg ca cf ch co col corp dept dr ed eds eq eqs esp
    fig figs gen gov govt inc jr ltd mr mrs ms nos pp prof rep resp rev
    sec secs sen sr st supp tab tbl vol vols vs
    e.g i.e u.s u.k u.n a.m p.m ph.d b.sc m.sc et.al viz
    jan feb mar apr jun jul aug sep sept oct nov dec
    """.split()
)

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def _untimed(pattern) -> regex.Pattern:
    """NLTK's pattern on the same engine (``regex``), without the per-call timeout that NLTK adds
    against caller-supplied patterns: these are Punkt's own, fixed ones."""
    return regex.compile(pattern.pattern, pattern.flags)


_LANGUAGE = PunktLanguageVars()
_MARK = _LANGUAGE._re_sent_end_chars  # [.?!]
_ASCII_SPACE = "".join(f"\\x{ord(c):02x}" for c in string.whitespace)  # where Punkt looks for a word's start
# Punkt's candidate break (a mark; after_tok: punctuation, or spaces and next_tok) and, without
# changing where it matches, two groups that are empty where they do not apply:
_PERIOD_CONTEXT = _LANGUAGE.period_context_re()
_CANDIDATE = regex.compile(
    _PERIOD_CONTEXT.pattern
    # word: the text before the mark, back to the last ASCII whitespace or the start, when near
    + rf"(?:(?<=(?:^|[{_ASCII_SPACE}])(?P<word>[^{_ASCII_SPACE}]{{0,64}}){_MARK})|)"
    # closed: nothing, or a character that ends a word, before the mark: the mark is then a token
    # of its own, or ends one ("'.", "?."), and breaks
    + rf"(?:(?<=(?:^|[{_ASCII_SPACE}]|{_LANGUAGE._re_non_word_chars}){_MARK})(?P<closed>)|)",
    _PERIOD_CONTEXT.flags,
)
_AFTER, _NEXT, _WORD, _CLOSED = (_CANDIDATE.groupindex[name] for name in ("after_tok", "next_tok", "word", "closed"))
_LAST_SPACE = regex.compile(f"[{_ASCII_SPACE}]", regex.REVERSE)
# A word that is one word token with a period after it (word characters with single inner
# periods or hyphens), after characters that cannot start a word (tokens of their own, never a
# break): a number or an initial as Punkt's types see them, or a plain word.
_WORD_BEFORE_PERIOD = regex.compile(
    rf"(?:(?!{_LANGUAGE._re_word_start})\S)*"
    r"(?:(?P<number>\d+(?:[.-]\d+)*)|(?P<initial>[^\W\d])|(?P<plain>\w+(?:[.-]\w+)*))"
)
_MARK_BEFORE_END = regex.compile(rf"{_MARK}(?!$)")
_WORD_TOKEN = _untimed(_LANGUAGE._word_tokenizer_re())
_REALIGNMENT = _untimed(PunktLanguageVars.re_boundary_realignment)  # closing marks that join the sentence before
_NUMERIC, _INITIAL = _untimed(PunktToken._RE_NUMERIC), _untimed(PunktToken._RE_INITIAL)
_SENTENCE_MARKS = frozenset(PunktLanguageVars.sent_end_chars)
_PUNCTUATION = frozenset(PunktSentenceTokenizer.PUNCTUATION)
# Whitespace other than a space: with it, or with two spaces in a row, a sentence's whitespace
# runs need collapsing, not only stripping.
_OTHER_SPACE = re.compile(r"[^\S ]")


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences, each stripped and with whitespace runs collapsed.

    Returns an empty list for text that is empty or only whitespace.
    """
    sentences = []
    for paragraph in _PARAGRAPH_BREAK.split(text):
        spans = _realigned(paragraph, _sentence_spans(paragraph))
        if _single_spaced(paragraph):
            paragraph_sentences = (paragraph[start:stop].strip() for start, stop in spans)
        else:
            paragraph_sentences = (" ".join(paragraph[start:stop].split()) for start, stop in spans)
        sentences += filter(None, paragraph_sentences)
    return sentences


def _single_spaced(text: str) -> bool:
    """Whether ``text``'s only whitespace is single spaces. Every other whitespace character is
    unprintable, so printable text needs no search."""
    return "  " not in text and (text.isprintable() or not _OTHER_SPACE.search(text))


def _sentence_spans(text: str) -> list[tuple[int, int]]:
    """Punkt's sentences of one paragraph as ``(start, stop)`` offsets, before realignment
    (``PunktSentenceTokenizer._slices_from_text`` and ``_match_potential_end_contexts``).

    A candidate's context starts after the last ASCII whitespace before it; candidates with no
    such whitespace between them form a chain, decided once, at its last mark, from the context
    of the whole chain. Each candidate is decided when the next one shows that it ends a chain."""
    spans, sentence = [], 0
    previous, previous_start, previous_mark = None, 0, 0
    for match in _CANDIDATE.finditer(text):
        mark, start = match.start(), match.start(_WORD)
        if start < 0:  # a long word: look back for the space
            space = _LAST_SPACE.search(text, previous_mark, mark)
            start = space.end() if space else 0
        if start <= previous_mark + 1:
            start = previous_start  # no whitespace since the last mark: a chain (or the first word)
        if previous is not None and previous_mark <= start and _candidate_breaks(text, previous, previous_start):
            spans.append((sentence, previous_mark + 1))
            sentence = _next_sentence(previous)
        previous, previous_start, previous_mark = match, start, mark
    if previous is not None and _candidate_breaks(text, previous, previous_start):
        spans.append((sentence, previous_mark + 1))
        sentence = _next_sentence(previous)
    spans.append((sentence, len(text.rstrip())))
    return spans


def _next_sentence(candidate: regex.Match) -> int:
    """Where the sentence after a break starts: at the next token, or at the punctuation after
    the mark."""
    following = candidate.start(_NEXT)
    return following if following >= 0 else candidate.end()


def _candidate_breaks(text: str, candidate: regex.Match, start: int) -> bool:
    """Punkt's decision for a ``candidate`` whose context starts at ``start``: whether a word
    token of the context, but the last, ends a sentence."""
    mark = candidate.start()
    if text[mark] != "." or candidate.start(_CLOSED) >= 0:
        return True  # a question or exclamation mark, or a period after a closing character
    kind, word = _word_kind(text[start:mark])
    if kind is not None and _period_ends_sentence(kind, word, text[_next_sentence(candidate)]):
        return True
    after, end = candidate.span(_AFTER)
    if kind is not None and not _MARK_BEFORE_END.search(text, after, end):
        # The period does not break, and no later token can: only one with a sentence mark
        # before its end could (or the next token is not the one-character PUNCTUATION token
        # that its first character suggested); then the context is read as below.
        return False
    return _context_breaks(text[start:end])


def _word_kind(before: str) -> tuple[str | None, str]:
    """The kind ("plain", "number" or "initial", as Punkt's types see them) and the word of the
    text before a period, when that word is one token with the period; ``(None, "")`` otherwise."""
    if before.isascii() and before.isalpha():  # the common case, without a regular expression
        return ("initial" if len(before) == 1 else "plain"), before
    match = _WORD_BEFORE_PERIOD.fullmatch(before)
    return (match.lastgroup, match.group(match.lastgroup)) if match else (None, "")


def _period_ends_sentence(kind: str, word: str, following: str) -> bool:
    """``_breaks_after(word + ".", token)`` for a ``word`` of ``kind`` and a next token that starts
    with ``following``, taken to be that one character when it is a PUNCTUATION character (it is,
    for ",;:", which are always tokens of their own)."""
    stem = word.lower()
    if stem in ABBREVIATIONS or stem.rpartition("-")[2] in ABBREVIATIONS:
        return False
    if kind == "plain":
        return True
    if following in _PUNCTUATION or following.islower():
        return False
    return not (kind == "initial" and following.isupper())


def _context_breaks(context: str) -> bool:
    """``PunktSentenceTokenizer.text_contains_sentbreak``: whether any word token of the candidate's
    context but the last ends a sentence."""
    words = [word for line in context.split("\n") if line.strip() for word in _WORD_TOKEN.findall(line)]
    return any(_breaks_after(word, following) for word, following in zip(words, words[1:]))


def _breaks_after(word: str, following: str) -> bool:
    """Punkt's decision for ``word`` followed by ``following``, when no orthographic context,
    collocation or sentence starter was learned (``PunktSentenceTokenizer._second_pass_annotation``)."""
    if word in _SENTENCE_MARKS:
        return True
    if not word.endswith(".") or word.endswith(".."):  # no period, or an ellipsis: never a break
        return False
    stem = word[:-1].lower()
    if stem in ABBREVIATIONS or stem.split("-")[-1] in ABBREVIATIONS:
        return False  # an abbreviation: only learned statistics could make it a break
    kind = _NUMERIC.sub("##number##", word.lower())
    initial = _INITIAL.match(word)
    if initial or kind in ("##number##", "##number##."):
        # Orthographic heuristic with no learned context: punctuation or a lower-case word
        # after it is no sentence start, and an initial before a capital is a name.
        if following in _PUNCTUATION or following[0].islower():
            return False
        if initial and following[0].isupper():
            return False
    return True


def _realigned(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Closing quotes and brackets at the start of a sentence join the one before
    (``PunktSentenceTokenizer._realign_boundaries``); empty sentences are dropped."""
    realigned, shift = [], 0
    for (start, stop), following in zip(spans, spans[1:] + [None]):
        start += shift
        # Closing marks are punctuation: a sentence that starts with a letter or digit keeps it.
        closing = following and not text[following[0]].isalnum() and _REALIGNMENT.match(text, *following)
        if closing:
            realigned.append((start, following[0] + len(closing.group().rstrip())))
            shift = closing.end() - following[0]
        else:
            shift = 0
            if start < stop:
                realigned.append((start, stop))
    return realigned


# --------------------------------------------------------------------------- the reference


@lru_cache(maxsize=1)
def nltk_punkt() -> PunktSentenceTokenizer:
    """NLTK's own Punkt with this module's parameters."""
    params = PunktParameters()
    params.abbrev_types = set(ABBREVIATIONS)
    return PunktSentenceTokenizer(params)


def nltk_punkt_sentences(text: str) -> list[str]:
    """``split_sentences`` by NLTK's own Punkt, many times slower: the reference that tests and
    benchmarks compare it with."""
    sentences = (" ".join(s.split()) for p in _PARAGRAPH_BREAK.split(text) for s in nltk_punkt().tokenize(p))
    return [sentence for sentence in sentences if sentence]
