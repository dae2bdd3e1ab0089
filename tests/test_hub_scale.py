"""``summarize()`` at scale: an empty document is an error naming it, or a counted skip; a
document longer than the view reads says how much of it was not read; memory follows the
batch, not the number of documents."""

import tracemalloc

import pytest

from builders.corpora import acl_papers
from builders.models import build_tiny
from pagesum_plugin.corpus.readers import example_from_raw
from pagesum_plugin.hub_interface import PageSumHubInterface
from pagesum_plugin.summaries import EmptyDocument, Reading

pytestmark = pytest.mark.usefixtures("one_thread")

GEN = dict(beam=1, min_len=1, max_len_b=3, no_repeat_ngram_size=0)  # what is decoded does not matter here
PAPER_TEXTS = [s["text"] for p in acl_papers(60) for s in p["sections"]]


@pytest.fixture(scope="module")
def hub(paged):
    """A random tiny PageSum over real papers' sentencepiece corpus (plain strings are read
    spatially: 7 pages of at most 1,024 tokens)."""
    _, task, model = build_tiny(paged)
    return PageSumHubInterface(task, model, paged)


def text_of(characters: int) -> str:
    text = ""
    while len(text) < characters:
        text += " ".join(PAPER_TEXTS) + " "
    return text[:characters]


def short_documents(count: int, characters: int = 800) -> list:
    return [f"Document {i}. " + PAPER_TEXTS[i % len(PAPER_TEXTS)][:characters] for i in range(count)]


def test_an_empty_document_is_an_error_that_names_it(hub):
    with pytest.raises(EmptyDocument, match=r"^document 1: the document is empty; pass skip_invalid=True to skip"):
        hub.summarize(["A short document. It has two sentences.", "   ", "Another one."], **GEN)


def test_skip_invalid_counts_the_empty_document_and_keeps_every_other_in_its_place(hub):
    documents = short_documents(3)
    summaries = hub.summarize([documents[0], "", documents[1], [("Intro", " "), ("Method", "")], documents[2]],
                              skip_invalid=True, **GEN)
    assert summaries.skipped == {1: "the document is empty", 3: "the document is empty"}
    assert [summaries[i] for i in (1, 3)] == [None, None]
    assert [summaries[i] for i in (0, 2, 4)] == hub.summarize(documents, **GEN)


def test_a_document_longer_than_the_view_says_how_much_was_not_read(hub):
    long = text_of(200_000)
    summaries = hub.summarize(["A short document. It has two sentences.", long], **GEN)
    tokens = len(hub.codec.encode_document(example_from_raw(long)).units)  # sentencepiece: no head ids
    read = sum(len(page) - 2 for page in hub.pages(long))
    assert summaries.truncated == {1: Reading(tokens=tokens, read=read, pages_dropped=0)}
    assert read <= 7 * 1022 < tokens
    assert str(summaries.truncated[1]) == f"read {read:,} of {tokens:,} tokens ({tokens - read:,} not read)"


def peak_bytes(call) -> int:
    """The most memory that Python and numpy allocated and held at once during ``call()``."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_six_hundred_documents_with_a_huge_and_an_empty_one_in_memory_bounded_by_the_batch(hub):
    """The huge document comes last, after 598 documents of about 1,500 tokens: paging every
    document before decoding would hold all their pages (about 7 MB) when the huge one is
    read; paging a batch at a time holds one batch's."""
    huge, batch_size = text_of(2_000_000), 8
    documents = short_documents(598, characters=3000) + ["", huge]
    last_batch = documents[-batch_size:]
    hub.summarize(last_batch, skip_invalid=True, batch_size=batch_size, **GEN)  # warm-up: one-time allocations
    peak_batch = peak_bytes(lambda: hub.summarize(last_batch, skip_invalid=True, batch_size=batch_size, **GEN))
    results = {}
    peak_all = peak_bytes(lambda: results.setdefault("all", hub.summarize(documents, skip_invalid=True,
                                                                          batch_size=batch_size, **GEN)))
    summaries = results["all"]
    assert len(summaries) == 600 and summaries.skipped == {598: "the document is empty"}
    assert sum(s is not None for s in summaries) == 599
    assert summaries.truncated[599].dropped > 900_000  # of about 989,000 tokens
    assert peak_all < peak_batch + 2_000_000, (peak_batch, peak_all)
