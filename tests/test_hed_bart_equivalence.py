"""HED on a cluster of one document is plain BART on <s> doc </s>, and it starts from BART's weights."""

import os

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq.models.bart import BARTModel

from builders.hed import build_hed, dense_reference_encoder
from builders.models import (
    at_summary_positions,
    bart_twin,
    decoder_input,
    log_probs,
    make_source_sensitive,
    paged_batch,
    random_pages,
    save_bart_checkpoint,
    vocab,
)
from builders.stock import assert_same_hypotheses, over_search_settings, stock_generate
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.systems.hed.attention import DocumentLayout


@pytest.fixture(scope="module")
def hed(copy_task_dir):
    return build_hed(copy_task_dir)


def one_document_clusters(task, seed, n=3):
    rng = torch.Generator().manual_seed(seed)
    return [random_pages(rng, 1, *vocab(task.dictionary), min_len=3, max_len=14) for _ in range(n)]


def assert_same_log_probs(hed, bart, clusters, prev, pad: int) -> None:
    """HED on clusters of one document (batch, 1, len) gives BART's log-probabilities of the
    document at every summary position."""
    reference = at_summary_positions(log_probs(bart, clusters[:, 0], prev)[0], prev, pad)
    ours = at_summary_positions(log_probs(hed, clusters, prev)[0], prev, pad)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)


def test_one_document_cluster_equals_fairseq_bart_log_probs(hed):
    args, task, model = hed
    bart = bart_twin(args, task, model)
    src = paged_batch(one_document_clusters(task, 1), task.dictionary)  # (3, 1, len)
    _, prev = decoder_input([[5, 6, 7, 8], [9, 10], [11, 12, 13]], task.dictionary)
    assert_same_log_probs(model, bart, src, prev, task.dictionary.pad())


@over_search_settings
def test_one_document_beam_search_equals_fairseq_stock_generator_on_bart(copy_task_dir, settings):
    args, task, model = build_hed(copy_task_dir)
    make_source_sensitive(model, task.dictionary)
    bart = bart_twin(args, task, model)
    src = paged_batch(one_document_clusters(task, 2), task.dictionary)
    sample = {"id": torch.arange(3), "net_input": {"src_tokens": src, "src_lengths": src.ne(1).sum((1, 2))}}
    ours = PageSumSequenceGenerator([model], task.dictionary, **settings).generate([model], sample)

    assert_same_hypotheses(ours, stock_generate(bart, task.dictionary, src[:, 0], settings))


@pytest.fixture(scope="module")
def bart_checkpoint(hed, tmp_path_factory):
    """A stock BART with BART's 1,024 encoder positions, saved as fairseq releases it."""
    args, task, _ = hed
    bart_args = type(args)(**{**vars(args), "arch": "bart_base", "max_source_positions": 1024})
    torch.manual_seed(5)
    bart = BARTModel.build_model(bart_args, task).eval()
    path = os.path.join(str(tmp_path_factory.mktemp("bart")), "model.pt")
    save_bart_checkpoint(path, bart, encoder_embed_dim=64)
    return bart, path


def load_into_hed(copy_task_dir, path):
    args, task, model = build_hed(copy_task_dir)
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    model.load_state_dict(state["model"], strict=True, model_cfg=None)  # fairseq's loading path
    return args, task, model.eval()


def test_a_bart_checkpoint_loads_with_its_1024_positions_tiled_to_4096(copy_task_dir, bart_checkpoint):
    bart, path = bart_checkpoint
    _, _, model = load_into_hed(copy_task_dir, path)
    table, bart_table = model.encoder.embed_positions.weight, bart.encoder.embed_positions.weight
    assert table.shape[0] == 4096 + 2 and bart_table.shape[0] == 1024 + 2
    offset = 2  # fairseq's learned positions start after the padding index
    for copy in range(4):
        rows = slice(offset + 1024 * copy, offset + 1024 * (copy + 1))
        assert torch.equal(table[rows], bart_table[offset:])
    assert torch.equal(table[:offset], bart_table[:offset])


def test_a_bart_checkpoint_loaded_into_hed_reads_one_document_as_bart_does(copy_task_dir, bart_checkpoint):
    bart, path = bart_checkpoint
    _, task, model = load_into_hed(copy_task_dir, path)
    src = paged_batch(one_document_clusters(task, 3), task.dictionary)
    _, prev = decoder_input([[5, 6], [7, 8, 9], [10]], task.dictionary)
    assert_same_log_probs(model, bart, src, prev, task.dictionary.pad())


def test_a_document_longer_than_bart_reads_its_tiled_positions_past_1024(copy_task_dir, bart_checkpoint):
    """Section 5.3: a document of more than 1,024 tokens is read with BART's positions tiled;
    its token at position 1,024 + p is embedded with BART's row for position p, and the
    encoder over the whole cluster equals the dense masked reference."""
    args, task, model = load_into_hed(copy_task_dir, bart_checkpoint[1])
    low, high = vocab(task.dictionary)
    rng = torch.Generator().manual_seed(8)
    long_doc = torch.randint(low, high, (1400,), generator=rng).tolist()  # 1,402 tokens with <s> and </s>
    cluster = [long_doc, random_pages(rng, 1, low, high)[0]]
    layout = DocumentLayout(paged_batch([cluster], task.dictionary), task.dictionary.pad())
    assert int(layout.positions.max()) == 1401
    table = model.encoder.embed_positions.weight
    offset = model.encoder.padding_idx + 1
    assert torch.equal(table[offset + 1024 + 300], table[offset + 300]), "position 1,324 reads BART's row 300"
    states = model.encoder(paged_batch([cluster], task.dictionary))["encoder_out"][0][:, 0]  # (src_len, dim)
    reference = dense_reference_encoder(args, model.encoder, cluster, task.dictionary)
    torch.testing.assert_close(states[: reference.size(0)], reference, atol=1e-5, rtol=0)
