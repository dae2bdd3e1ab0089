"""Paging as the authors' released code pages: their spatial split, their placeholder pages
(as an option), and one whitespace rule for every view."""

import numpy as np
import pytest
import torch

from builders.bpe import build_gpt2_bpe
from builders.models import build_tiny, paged_batch
from builders.paged_data import document_of_pages
from pagesum_plugin.corpus.codec import TextCodec
from pagesum_plugin.corpus.readers import example_from_raw
from pagesum_plugin.corpus.tokenizers import build_dictionary, build_tokenizer
from pagesum_plugin.corpus.views import ViewConfig, assemble_pages

BOS, EOS = 0, 2
DOT = (4,)  # a placeholder page's ids


def page_sizes_in_sentences(n_sentences: int, num_pages: int, split: str):
    """Sentences per spatial page, for a document of one-token sentences."""
    document = document_of_pages([[10 + i] for i in range(n_sentences)])
    document.unit_group[:] = 0  # one section of n sentences
    document.name_length = np.zeros(1, dtype=np.int64)
    pages = assemble_pages(document, ViewConfig("spatial", num_pages=num_pages, spatial_split=split), BOS, EOS)
    return [len(page) - 2 for page in pages]


def test_the_authors_split_puts_n_div_k_sentences_per_page_and_the_rest_on_the_last():
    assert page_sizes_in_sentences(10, 3, "authors") == [3, 3, 4]
    assert page_sizes_in_sentences(11, 4, "authors") == [2, 2, 2, 5]


def test_the_authors_split_puts_fewer_sentences_than_pages_on_one_page():
    assert page_sizes_in_sentences(3, 7, "authors") == [3]  # n // k = 0 a page: all on the last one


def test_with_placeholders_the_authors_split_of_a_short_document_is_the_released_codes_pages():
    document = document_of_pages([[10], [11], [12]])
    document.unit_group[:] = 0
    document.name_length = np.zeros(1, dtype=np.int64)
    config = ViewConfig("spatial", num_pages=4, spatial_split="authors", placeholder=DOT)
    pages = [page.tolist() for page in assemble_pages(document, config, BOS, EOS)]
    # the released code: pages 1-3 empty, filled with ".", page 4 all three sentences; the
    # page softmax does not depend on the pages' order, so the filler pages come last here
    assert pages == [[BOS, 10, 11, 12, EOS]] + [[BOS, *DOT, EOS]] * 3


def test_the_even_split_gives_the_extra_sentences_to_the_first_pages():
    assert page_sizes_in_sentences(10, 3, "even") == [4, 3, 3]


def test_both_splits_agree_when_the_sentences_divide_evenly():
    assert page_sizes_in_sentences(12, 4, "authors") == page_sizes_in_sentences(12, 4, "even") == [3, 3, 3, 3]


def two_documents():
    return document_of_pages([[10, 11, 12], [13, 14]])


def test_missing_pages_are_absent_by_default():
    pages = assemble_pages(two_documents(), ViewConfig("document", max_pages=5), BOS, EOS)
    assert [p.tolist() for p in pages] == [[BOS, 10, 11, 12, EOS], [BOS, 13, 14, EOS]]


def test_placeholder_pages_fill_every_example_to_its_page_limit():
    pages = assemble_pages(two_documents(), ViewConfig("document", max_pages=5, placeholder=DOT), BOS, EOS)
    assert [p.tolist() for p in pages] == [[BOS, 10, 11, 12, EOS], [BOS, 13, 14, EOS]] + [[BOS, *DOT, EOS]] * 3


def test_placeholder_pages_take_part_in_the_page_softmax(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir)
    content = [[[10, 11, 12], [13, 14]], [[10, 11, 12], [13, 14], list(DOT), list(DOT), list(DOT)]]
    src = paged_batch(content, task.dictionary)  # (2, 5, page_len): masked vs. filled
    prev = torch.tensor([[EOS, BOS, 20, 21]] * 2)
    _, extra = model(src, None, prev)
    weights = extra["page_weights"]  # (batch, max_pages, tgt_len)
    assert torch.all(weights[0, 2:] == 0)  # absent pages: weight exactly 0
    assert torch.all(weights[1, 2:] > 0)  # placeholder pages: a share of the softmax
    torch.testing.assert_close(weights.sum(1), torch.ones(2, 4))


def test_placeholder_pages_need_a_view_with_a_page_limit():
    with pytest.raises(ValueError, match="placeholder"):
        ViewConfig("token", placeholder=DOT)


@pytest.fixture(scope="module")
def codec(tmp_path_factory):
    texts = ["First line of a story.\nIts second line.\n\nA new paragraph, here.", "Intro", "Another story."]
    files = build_gpt2_bpe(tmp_path_factory.mktemp("bpe"), texts, vocab_size=400)
    tokenizer = build_tokenizer("gpt2", encoder_json=files.encoder_json, vocab_bpe=files.vocab_bpe)
    return TextCodec(tokenizer, build_dictionary(tokenizer, files.dict_txt))


@pytest.mark.parametrize("view", ["spatial", "discourse", "document", "token", "flat", "documents", "segments"])
def test_every_view_joins_sentences_with_single_spaces(codec, view):
    raw = "First line of a story.\nIts second line.\n\nA new paragraph, here."
    document = codec.encode_document(example_from_raw([("Intro", raw), ("", "Another story.")]))
    config = ViewConfig(view, num_pages=1, max_pages=2, max_page_tokens=1024)
    bos, eos = codec.dictionary.bos(), codec.dictionary.eos()
    texts = [codec.tokenizer.decode([codec.dictionary[i] for i in page[1:-1]]) for page in
             assemble_pages(document, config, bos, eos)]
    assert all("\n" not in text and "  " not in text for text in texts)
    assert " ".join(texts).replace("Intro: ", "") == " ".join(raw.split() + ["Another", "story."])


def test_summaries_follow_the_same_whitespace_rule_as_pages(codec):
    paragraphs = "First line of a story.\nIts second line.\n\nA new paragraph, here."  # GovReport's summary layout
    ids = codec.encode_summary(paragraphs)
    assert codec.tokenizer.decode([codec.dictionary[i] for i in ids]) == " ".join(paragraphs.split())
    assert list(ids) == list(codec.encode_summary(" ".join(paragraphs.split())))
