"""The task's view flags override what the corpus stored (its ``meta.json``): each one, given,
changes the pages or the summaries that training, validation and ``summarize()`` read, exactly
as the view it names pages the stored documents. The corpus here stores discourse pages."""

from dataclasses import replace

import pytest
import torch

from builders.models import build_tiny
from pagesum_plugin.corpus.views import assemble_pages
from pagesum_plugin.data.paged_dataset import summary_target

# (the flags both tasks get, the flag under test and its value, the view setting it makes)
VIEW_FLAGS = [
    ([], ["--view", "spatial"], {"view": "spatial"}),
    (["--view", "spatial"], ["--num-pages", "3"], {"num_pages": 3}),
    (["--view", "spatial", "--num-pages", "4"], ["--spatial-split", "even"], {"spatial_split": "even"}),
    ([], ["--max-pages", "2"], {"max_pages": 2}),
    ([], ["--max-page-tokens", "16"], {"max_page_tokens": 16}),
    (["--view", "flat"], ["--max-source-tokens", "40"], {"max_source_tokens": 40}),
]


def pages_of(task) -> list:
    """Every test example's pages, as the task's dataset feeds them."""
    task.load_dataset("test")
    dataset = task.datasets["test"]
    return [[page.tolist() for page in dataset[i]["pages"]] for i in range(len(dataset))]


@pytest.mark.parametrize("common, flag, setting", VIEW_FLAGS, ids=[flag[0] for _, flag, _ in VIEW_FLAGS])
def test_a_view_flag_pages_the_stored_documents_in_the_view_it_names(paged, common, flag, setting):
    _, without, _ = build_tiny(paged, *common)
    _, given, _ = build_tiny(paged, *common, *flag)
    expected_view = replace(without.view, **setting)
    assert given.view == expected_view  # what summarize() pages raw documents with, too

    fed = pages_of(given)
    corpus = given.datasets["test"].corpus
    bos, eos = given.dictionary.bos(), given.dictionary.eos()
    expected = [[page.tolist() for page in assemble_pages(corpus.document(i), expected_view, bos, eos)]
                for i in range(len(fed))]
    assert fed == expected
    assert fed != pages_of(without), f"{' '.join(flag)} changes no page of these documents"


def test_max_summary_tokens_cuts_every_summary_the_task_feeds(paged):
    _, stored, _ = build_tiny(paged)
    _, given, _ = build_tiny(paged, "--max-summary-tokens", "8")
    for task in (stored, given):
        task.load_dataset("test")
    corpus = given.datasets["test"].corpus
    bos, eos = given.dictionary.bos(), given.dictionary.eos()
    for i in range(len(given.datasets["test"])):
        assert torch.equal(given.datasets["test"][i]["target"], summary_target(corpus.summary(i), bos, eos, 8))
        assert len(stored.datasets["test"][i]["target"]) > 8  # the stored limit keeps them whole
