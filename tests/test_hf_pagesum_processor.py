"""PageSumProcessor reads a raw document as the plugin does, without fairseq: through a transformers
tokenizer (the BART tokenizer that ``pagesum-convert to-hf`` writes), the pages of every view are the
plugin's pages, token for token: the same sentence units, first words, section names, page sizes and
limits, and the same rule for a plain string."""

import re

import numpy as np
import pytest
from transformers import BartTokenizerFast

from builders.bpe import build_gpt2_bpe
from builders.corpora import acl_papers
from pagesum_plugin.checkpoints.hf_vocab import write_hf_tokenizer
from pagesum_plugin.corpus.codec import TextCodec
from pagesum_plugin.corpus.errors import EmptyDocument, MalformedDocument
from pagesum_plugin.corpus.options import ViewConfig
from pagesum_plugin.corpus.readers import example_from_raw
from pagesum_plugin.corpus.tokenizers import build_dictionary, build_tokenizer
from pagesum_plugin.corpus.views import assemble_pages, raw_document_view
from pagesum_plugin.hf import PageSumProcessor

PAPERS = acl_papers(6)


def as_sections(paper):
    return [(section["name"], section["text"]) for section in paper["sections"]]


def as_string(paper):
    return "\n".join(section["text"] for section in paper["sections"])


def as_documents(paper):
    return [section["text"] for section in paper["sections"]][:4]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """(the plugin's codec, the transformers processor's tokenizer directory) of one BPE, trained on the papers."""
    data = tmp_path_factory.mktemp("data")
    texts = [as_string(paper) for paper in PAPERS] + [section["name"] for p in PAPERS for section in p["sections"]]
    files = build_gpt2_bpe(data, texts, vocab_size=600)
    tokenizer = build_tokenizer("gpt2", encoder_json=files.encoder_json, vocab_bpe=files.vocab_bpe)
    codec = TextCodec(tokenizer, build_dictionary(tokenizer, files.dict_txt))
    hf_dir = tmp_path_factory.mktemp("hf")
    write_hf_tokenizer(data, hf_dir, len(codec.dictionary))
    return codec, hf_dir


def plugin_pages(codec, document, config, locality=None):
    """The pages summarize() reads (hub_interface.read): the codec's units through the view."""
    config = raw_document_view(document, config, locality)
    units = codec.encode_document(example_from_raw(document))
    return assemble_pages(units, config, codec.dictionary.bos(), codec.dictionary.eos())


VIEWS = [  # (how a paper is given, the view asked for or None, the view's settings)
    (as_string, None, dict(view="spatial", num_pages=5, max_page_tokens=64)),
    (as_string, "token", dict(num_pages=4, max_page_tokens=48)),
    (as_sections, None, dict(view="discourse", max_pages=6, max_page_tokens=80)),
    (as_documents, "document", dict(max_pages=3, max_page_tokens=100)),
    (as_string, None, dict(view="discourse", max_pages=6, max_page_tokens=80)),  # a string is read spatially
]


@pytest.mark.parametrize("given, locality, settings", VIEWS)
def test_every_view_gives_the_plugins_pages_token_for_token(tokenizers, given, locality, settings):
    codec, hf_dir = tokenizers
    processor = PageSumProcessor.from_pretrained(str(hf_dir), **settings)
    assert isinstance(processor.tokenizer, BartTokenizerFast)
    for paper in PAPERS:
        document = given(paper)
        expected = plugin_pages(codec, document, ViewConfig(**settings), locality)
        pages = processor.pages(document, locality)
        assert len(pages) == len(expected) > 1
        for page, want in zip(pages, expected):
            np.testing.assert_array_equal(page, want)


def test_a_batch_of_documents_is_padded_to_pages_with_their_mask(tokenizers):
    codec, hf_dir = tokenizers
    processor = PageSumProcessor.from_pretrained(str(hf_dir), view="spatial", num_pages=3, max_page_tokens=40)
    documents = [as_string(PAPERS[0]), "One short sentence. And a second one."]
    batch = processor(documents)
    first, second = (processor.pages(document) for document in documents)
    assert tuple(batch["input_ids"].shape) == (2, 3, 40)
    assert batch["attention_mask"][1].sum(dim=1).tolist() == [len(page) for page in second] + [0] * (3 - len(second))
    np.testing.assert_array_equal(batch["input_ids"][0, 1, : len(first[1])].numpy(), first[1])
    assert (batch["input_ids"][batch["attention_mask"] == 0] == processor.tokenizer.pad_token_id).all()


def test_a_document_without_text_is_refused(tokenizers):
    _, hf_dir = tokenizers
    with pytest.raises(ValueError):
        PageSumProcessor.from_pretrained(str(hf_dir)).pages("   ")


@pytest.mark.parametrize("document, line", [
    ([("Intro", None)], "section 0: its 'text' is NoneType, not a string"),
    (["A story.", ("Intro", "We parse.")], "item 0 is a string and item 1 is not"),
    (("Intro", "We parse."), "a single section is not a document"),
])
def test_a_document_of_no_shape_the_processor_reads_is_refused_in_one_line_as_summarize_refuses_it(
        tokenizers, document, line):
    _, hf_dir = tokenizers
    processor = PageSumProcessor.from_pretrained(str(hf_dir), view="spatial", num_pages=3, max_page_tokens=40)
    with pytest.raises(MalformedDocument, match=re.escape(line)):
        processor.pages(document)


def test_a_cluster_with_an_empty_document_is_refused_not_read_one_document_short(tokenizers):
    _, hf_dir = tokenizers
    processor = PageSumProcessor.from_pretrained(str(hf_dir), view="document", max_pages=3, max_page_tokens=40)
    with pytest.raises(EmptyDocument, match="source document 1 of the cluster is empty"):
        processor.pages(["A story about foxes.", "  "])
