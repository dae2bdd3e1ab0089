"""Pages for each locality, as the binarizer writes them."""

import numpy as np
import pytest
from fairseq.data import Dictionary

from builders.bpe import build_gpt2_bpe
from builders.corpora import acl_papers
from pagesum_plugin.corpus.paging import Pager, PagingConfig, encode_page_tokens, encode_pages
from pagesum_plugin.corpus.readers import example_from_raw
from pagesum_plugin.corpus.tokenizers import build_dictionary, build_tokenizer


@pytest.fixture(scope="module")
def paper():
    return acl_papers(1, offset=4)[0]


@pytest.fixture(scope="module")
def tokenizer_and_dictionary(tmp_path_factory, paper):
    texts = [paper["summary"]] + [s["text"] for s in paper["sections"]]
    files = build_gpt2_bpe(tmp_path_factory.mktemp("bpe"), texts, vocab_size=600)
    tokenizer = build_tokenizer("gpt2", encoder_json=files.encoder_json, vocab_bpe=files.vocab_bpe)
    return tokenizer, build_dictionary(tokenizer, files.dict_txt)


def _sections(paper):
    return [(s["name"], s["text"]) for s in paper["sections"]]


def test_spatial_pages_are_contiguous_and_even_in_sentences(paper):
    example = example_from_raw(_sections(paper))
    sentences = [s for unit in example.units for s in unit.sentence_list()]
    pages = Pager(PagingConfig("spatial", num_pages=5)).page_texts(example)
    # numpy.array_split: contiguous chunks whose sizes differ by at most one.
    expected = [" ".join(chunk) for chunk in np.array_split(np.array(sentences, dtype=object), 5)]
    assert pages == expected
    assert " ".join(pages) == " ".join(sentences)


def test_spatial_never_makes_more_pages_than_sentences():
    assert Pager(PagingConfig("spatial", num_pages=7)).page_texts(example_from_raw("One. Two.")) == ["One.", "Two."]


def test_discourse_prepends_section_names_and_keeps_at_most_max_pages():
    example = example_from_raw([("Intro", "A."), ("", "B."), ("Method", "C.")])
    assert Pager(PagingConfig("discourse")).page_texts(example) == ["Intro: A.", "B.", "Method: C."]
    paged_config = PagingConfig("discourse", max_pages=2)
    assert len(Pager(paged_config).page_texts(example)) == 3  # the limit applies to written pages


def test_document_locality_makes_one_page_per_document():
    example = example_from_raw(["first story.", "second story."])
    assert Pager(PagingConfig("document")).page_texts(example) == ["first story.", "second story."]


@pytest.mark.parametrize("locality", ["spatial", "discourse", "document"])
def test_every_page_is_bos_content_eos_within_the_token_limit(paper, tokenizer_and_dictionary, locality):
    tokenizer, dictionary = tokenizer_and_dictionary
    config = PagingConfig(locality, num_pages=4, max_pages=6, max_page_tokens=64)
    pages = encode_pages(example_from_raw(_sections(paper)), config, tokenizer, dictionary)
    assert 1 <= len(pages) <= 6
    for page in pages:
        assert page[0] == dictionary.bos() and page[-1] == dictionary.eos()
        assert 3 <= len(page) <= 64
        assert not ({dictionary.bos(), dictionary.eos(), dictionary.pad()} & set(page[1:-1].tolist()))


def test_truncation_and_dropped_pages_are_counted_exactly(paper, tokenizer_and_dictionary):
    tokenizer, dictionary = tokenizer_and_dictionary
    example = example_from_raw(_sections(paper))
    config = PagingConfig("discourse", max_pages=3, max_page_tokens=40)
    full = [len(tokenizer.encode(text)) for text in Pager(config).page_texts(example)]
    paged = encode_page_tokens(example, config, tokenizer, dictionary)
    kept = sum(len(page) - 2 for page in paged.pages)
    assert paged.source_tokens == sum(full)
    assert paged.lost_tokens == sum(full) - kept
    assert paged.truncated_pages == sum(n > 38 for n in full[:3])
    assert paged.dropped_pages == len(full) - 3


def test_a_page_is_the_tokenized_page_text(paper, tokenizer_and_dictionary):
    tokenizer, dictionary = tokenizer_and_dictionary
    example = example_from_raw(_sections(paper))
    config = PagingConfig("document", max_pages=2)
    pages = encode_pages(example, config, tokenizer, dictionary)
    expected = [dictionary.index(s) for s in tokenizer.encode(example.units[0].text)][:1022]
    assert pages[0].tolist() == [dictionary.bos()] + expected + [dictionary.eos()]


def test_invalid_configs_are_rejected():
    with pytest.raises(ValueError):
        PagingConfig("chapters")
    with pytest.raises(ValueError):
        PagingConfig(max_page_tokens=2)
