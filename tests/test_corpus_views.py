"""Every view of a stored document: what its pages hold, and that the vectorized plan over a
whole split gives exactly the pages that each example gets on its own."""

import numpy as np
import pytest

from builders.paged_data import document_of_pages
from pagesum_plugin.corpus.format import EncodedDocument, SplitStructure
from pagesum_plugin.corpus.views import VIEWS, ViewConfig, assemble_pages, plan_document, plan_pages

BOS, EOS = 0, 2


def sections(*groups) -> EncodedDocument:
    """Sentences of one-id-per-token content, grouped: sections(([10, 11], [12]), ([13],))."""
    sentences = [s for group in groups for s in group]
    document = document_of_pages(sentences)
    document.unit_group = np.concatenate([[g] * len(group) for g, group in enumerate(groups)])
    document.name_length = np.zeros(len(groups), dtype=np.int64)
    return document


def contents(pages):
    return [page[1:-1].tolist() for page in pages]


def test_every_page_is_bos_content_eos():
    for view in VIEWS:
        for page in assemble_pages(sections(([10, 11], [12]), ([13],)), ViewConfig(view, max_pages=2), BOS, EOS):
            assert page[0] == BOS and page[-1] == EOS and len(page) >= 3


def test_spatial_never_makes_more_pages_than_sentences():
    for split, expected in (("even", [[10], [11]]), ("authors", [[10, 11]])):
        pages = assemble_pages(sections(([10], [11])), ViewConfig("spatial", num_pages=7, spatial_split=split), BOS, EOS)
        assert contents(pages) == expected


def test_discourse_and_document_pages_are_the_groups_up_to_max_pages():
    document = sections(([10], [11]), ([12],), ([13],))
    for view in ("discourse", "document"):
        assert contents(assemble_pages(document, ViewConfig(view, max_pages=2), BOS, EOS)) == [[10, 11], [12]]
    assert plan_document(document, ViewConfig("document", max_pages=2)).dropped_pages.tolist() == [1]


def test_a_page_is_cut_to_max_page_tokens():
    pages = assemble_pages(sections(([10, 11, 12, 13, 14],)), ViewConfig("document", max_page_tokens=5), BOS, EOS)
    assert contents(pages) == [[10, 11, 12]]


def test_token_pages_cut_the_document_to_its_budget_then_into_consecutive_pages():
    document = sections(([10, 11, 12], [13, 14]), ([15, 16, 17, 18],))
    pages = assemble_pages(document, ViewConfig("token", num_pages=2, max_page_tokens=5), BOS, EOS)
    assert contents(pages) == [[10, 11, 12], [13, 14, 15]]


def test_every_page_size_of_the_token_view_reads_the_same_text():
    document = sections(*[[list(range(10 + 7 * g, 17 + 7 * g))] for g in range(10)])
    small = sum(contents(assemble_pages(document, ViewConfig("token", num_pages=8, max_page_tokens=10), BOS, EOS)), [])
    large = sum(contents(assemble_pages(document, ViewConfig("token", num_pages=2, max_page_tokens=34), BOS, EOS)), [])
    assert small == large


def test_the_page_size_study_cuts_to_4096_tokens_counting_each_pages_bos_and_eos():
    document = sections(([*range(10, 5010)],))  # one sentence of 5,000 ids
    for page_tokens, num_pages, text in ((128, 32, 4032), (256, 16, 4064), (512, 8, 4080), (1024, 4, 4088)):
        plan = plan_document(document, ViewConfig("token", num_pages=num_pages, max_page_tokens=page_tokens))
        assert plan.page_sizes.tolist() == [page_tokens] * num_pages and plan.kept_tokens.tolist() == [text]


def test_flat_is_one_page_of_at_most_max_source_tokens():
    document = sections(([10, 11, 12], [13, 14]), ([15],))
    assert contents(assemble_pages(document, ViewConfig("flat", max_source_tokens=6), BOS, EOS)) == [[10, 11, 12, 13]]


def test_documents_keep_their_boundaries_and_each_is_cut_to_an_equal_share_of_max_source_tokens():
    """PRIMERA's truncation, which HED follows: 3 documents share 13 tokens, 4 each (13 // 3),
    <s> and </s> included, so every document is read and the later ones are not dropped."""
    document = sections(([10, 11, 12, 13, 14],), ([15],), ([16, 17, 18],))
    pages = assemble_pages(document, ViewConfig("documents", max_source_tokens=13), BOS, EOS)
    assert contents(pages) == [[10, 11], [15], [16, 17]]  # the second document's unused share goes to no other
    assert sum(len(page) for page in pages) <= 13


def test_a_cluster_of_more_documents_than_shares_of_one_token_keeps_the_first_and_counts_the_rest():
    document = sections(([10, 11],), ([12],), ([13],))
    view = ViewConfig("documents", max_source_tokens=8)  # 8 // 3 = 2: room for two documents of one token
    assert contents(assemble_pages(document, view, BOS, EOS)) == [[10, 11], [12]]
    plan = plan_document(document, view)
    assert plan.dropped_pages.tolist() == [1]


def test_segments_hold_whole_sentences_and_open_only_when_the_next_would_overflow():
    document = sections(([10, 11], [12, 13], [14, 15, 16]), ([17],))
    pages = assemble_pages(document, ViewConfig("segments", max_segment_tokens=6), BOS, EOS)
    assert contents(pages) == [[10, 11, 12, 13], [14, 15, 16, 17]]


def test_an_unknown_view_is_refused():
    with pytest.raises(ValueError, match="unknown view"):
        ViewConfig("chapters")


def test_pages_too_short_for_a_token_between_bos_and_eos_are_refused():
    with pytest.raises(ValueError, match="room"):
        ViewConfig(max_page_tokens=2)


def random_document(rng) -> EncodedDocument:
    groups = [[list(range(10, 10 + rng.randint(1, 12))) for _ in range(rng.randint(1, 6))]
              for _ in range(rng.randint(1, 5))]
    return sections(*groups)


@pytest.mark.parametrize("view", VIEWS)
def test_the_plan_of_a_whole_split_equals_each_examples_own_plan(view):
    rng = np.random.RandomState(0)
    documents = [random_document(rng) for _ in range(60)]
    split = SplitStructure(
        example_units=np.concatenate([[0], np.cumsum([len(d.unit_length) for d in documents])]),
        example_groups=np.concatenate([[0], np.cumsum([d.num_groups for d in documents])]),
        **{name: np.concatenate([getattr(d, name) for d in documents])
           for name in ("unit_length", "unit_group", "head_spaced", "head_plain", "name_length")},
    )
    config = ViewConfig(view, num_pages=3, max_pages=3, max_page_tokens=9, max_source_tokens=20, max_segment_tokens=12)
    plan = plan_pages(split, config)
    for i, document in enumerate(documents):
        pages = slice(plan.example_pages[i], plan.example_pages[i + 1])
        alone = plan_document(document, config)
        assert plan.page_sizes[pages].tolist() == alone.page_sizes.tolist()
        assert plan.page_truncated[pages].tolist() == alone.page_truncated.tolist()
        assert [len(p) for p in assemble_pages(document, config, BOS, EOS)] == alone.page_sizes.tolist()
