"""HED's hierarchical cross-attention (Section 4.2, Eq. 3-5), in every head of every layer."""

import pytest
import torch

from benchmarks.reference.modules import before
from builders.hed import build_hed, document_sizes, reference_cross_attention
from builders.models import decoder_input, paged_batch, random_pages, vocab
from pagesum_plugin.systems.hed.attention import HierarchicalCrossAttention, document_shapes, hierarchical_softmax

SIZES = [[5, 3, 9], [7], [2, 6, 4, 3]]  # tokens per document (SOD included) of three clusters


def document_map(sizes_per_cluster):
    """(batch, src_len) document of every key, -1 on padding."""
    width = max(sum(sizes) for sizes in sizes_per_cluster)
    rows = [[n for n, size in enumerate(sizes) for _ in range(size)] for sizes in sizes_per_cluster]
    return torch.tensor([row + [-1] * (width - len(row)) for row in rows])


def every_slot_map(sizes_per_cluster):
    """(batch, max_docs * slot_len): the map of every document slot laid out whole
    (``EverySlotLayout``), padding after each document and whole padding slots."""
    slots, slot_len = max(map(len, sizes_per_cluster)), max(max(sizes) for sizes in sizes_per_cluster)
    return torch.tensor([[n if n < len(sizes) and i < sizes[n] else -1 for n in range(slots) for i in range(slot_len)]
                         for sizes in sizes_per_cluster])


@pytest.fixture(scope="module")
def attended():
    """Random scores for 6 queries of each of three clusters, and their weights."""
    doc_map = document_map(SIZES)
    scores = torch.randn(len(SIZES), 6, doc_map.size(1), generator=torch.Generator().manual_seed(0)) * 3
    weights, doc_weights = hierarchical_softmax(scores, doc_map, *document_shapes(doc_map)[:2])
    return scores, doc_map, weights, doc_weights


def spans(sizes):
    return [(sum(sizes[:n]), sum(sizes[: n + 1])) for n in range(len(sizes))]


def test_eq3_within_a_document_the_weights_are_the_softmax_of_its_scores(attended):
    scores, _, weights, _ = attended
    for b, sizes in enumerate(SIZES):
        for start, end in spans(sizes):
            share = weights[b, :, start:end]
            torch.testing.assert_close(share / share.sum(-1, keepdim=True), torch.softmax(scores[b, :, start:end], -1))


def test_eq4_document_weights_are_the_softmax_of_the_start_token_scores(attended):
    scores, _, _, doc_weights = attended
    for b, sizes in enumerate(SIZES):
        sod_scores = torch.stack([scores[b, :, start] for start, _ in spans(sizes)], -1)
        torch.testing.assert_close(doc_weights[b, :, : len(sizes)], torch.softmax(sod_scores, -1))


def test_eq5_key_weights_are_document_weight_times_within_document_weight(attended):
    scores, _, weights, doc_weights = attended
    for b, sizes in enumerate(SIZES):
        n = sum(sizes)
        expected, expected_s = reference_cross_attention(scores[b, :, :n], sizes)
        torch.testing.assert_close(weights[b, :, :n], expected)
        torch.testing.assert_close(doc_weights[b, :, : len(sizes)], expected_s)


def test_the_weights_sum_to_one_over_the_keys(attended):
    _, _, weights, doc_weights = attended
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:2]))
    torch.testing.assert_close(doc_weights.sum(-1), torch.ones(doc_weights.shape[:2]))


def test_each_documents_share_of_the_weights_is_its_document_weight(attended):
    _, doc_map, weights, doc_weights = attended
    for n in range(doc_weights.size(2)):
        share = (weights * doc_map.eq(n).unsqueeze(1)).sum(-1)  # (batch, queries)
        torch.testing.assert_close(share, doc_weights[:, :, n])


def test_padding_keys_and_missing_documents_get_no_weight(attended):
    _, doc_map, weights, doc_weights = attended
    assert bool((weights * doc_map.lt(0).unsqueeze(1)).eq(0).all())
    for b, sizes in enumerate(SIZES):
        assert bool(doc_weights[b, :, len(sizes):].eq(0).all())


def test_scores_far_apart_stay_finite():
    """A document whose scores sit 200 below another's: no overflow, no NaN, weights exact."""
    doc_map = document_map([[3, 4]])
    scores = torch.tensor([[[0.0, -1.0, 2.0, -200.0, -201.0, -199.0, -200.5]]])
    weights, doc_weights = hierarchical_softmax(scores, doc_map, *document_shapes(doc_map)[:2])
    expected, expected_s = reference_cross_attention(scores[0], [3, 4])
    torch.testing.assert_close(weights[0], expected)
    torch.testing.assert_close(doc_weights[0], expected_s)


@pytest.fixture(scope="module")
def hed(copy_task_dir):
    return build_hed(copy_task_dir, "--decoder-layers", "3")


def test_every_head_of_every_decoder_layer_attends_hierarchically(hed):
    """Each layer's cross-attention output equals Eq. 3-5 written out per head and document."""
    _, task, model = hed
    rng = torch.Generator().manual_seed(3)
    clusters = [random_pages(rng, n, *vocab(task.dictionary), min_len=2) for n in (3, 1, 4)]
    src = paged_batch(clusters, task.dictionary)
    _, prev = decoder_input([[5, 6, 7], [8, 9], [10, 11, 12, 13]], task.dictionary)
    calls = []
    handles = [layer.encoder_attn.register_forward_hook(
        lambda m, args, kwargs, out: calls.append((m, kwargs, out[0])), with_kwargs=True)
        for layer in model.decoder.layers]
    try:
        model(src, None, prev)
    finally:
        for handle in handles:
            handle.remove()
    assert len(calls) == len(model.decoder.layers)
    for attention, kwargs, output in calls:
        heads, head_dim = attention.num_heads, attention.head_dim
        query, key = kwargs["query"], kwargs["key"]  # (tgt_len, batch, dim), (src_len, batch, dim)
        for b, cluster in enumerate(clusters):
            sizes = document_sizes(cluster)
            n = sum(sizes)
            q = (attention.q_proj(query[:, b]) * attention.scaling).view(-1, heads, head_dim)
            k = attention.k_proj(key[:n, b]).view(n, heads, head_dim)
            v = attention.v_proj(key[:n, b]).view(n, heads, head_dim)
            per_head = []
            for h in range(heads):
                weights, _ = reference_cross_attention(q[:, h] @ k[:, h].T, sizes)
                per_head.append(weights @ v[:, h])  # (tgt_len, head_dim)
            expected = attention.out_proj(torch.cat(per_head, -1))
            torch.testing.assert_close(output[:, b], expected, atol=1e-5, rtol=0)


def test_the_model_reports_the_last_layers_document_weights_as_page_weights(hed):
    _, task, model = hed
    rng = torch.Generator().manual_seed(4)
    clusters = [random_pages(rng, n, *vocab(task.dictionary), min_len=2) for n in (2, 4)]
    src = paged_batch(clusters, task.dictionary)
    _, prev = decoder_input([[5, 6, 7], [8, 9]], task.dictionary)
    encoder_out = model.encoder(src)
    _, extra = model.decoder(prev, encoder_out=encoder_out)
    page_weights = extra["page_weights"]  # (batch, max_docs, tgt_len)
    assert page_weights.shape == (2, 4, prev.size(1))

    last = model.decoder.layers[-1].encoder_attn
    captured = {}
    handle = last.register_forward_pre_hook(lambda m, args, kwargs: captured.update(kwargs), with_kwargs=True)
    model.decoder(prev, encoder_out=encoder_out)
    handle.remove()
    _, doc_weights = last.token_weights(captured["query"], captured["key"], captured["key_padding_mask"])
    expected = doc_weights.mean(0).transpose(1, 2)  # (heads, batch, tgt, docs) -> (batch, docs, tgt)
    torch.testing.assert_close(page_weights, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(page_weights.sum(1), torch.ones(2, prev.size(1)))
    assert bool(page_weights[0, 2:].eq(0).all()), "a cluster of two documents: the other slots get 0"


def cross_attention_module(seed=0):
    torch.manual_seed(seed)
    return HierarchicalCrossAttention(32, 4, kdim=32, vdim=32, dropout=0.0, encoder_decoder_attention=True).eval()


def attend(module, query, memory, doc_map, reference, steps=None):
    """Outputs and per-head document weights: one full pass, or ``steps`` incremental steps (``reference``:
    the module's twin of before, with the dense score matrix)."""
    module = before(module) if reference else module
    if steps is None:
        return [module(query, memory, memory, key_padding_mask=doc_map, need_head_weights=True)]
    state = {}
    return [module(query[t : t + 1], memory, memory, key_padding_mask=doc_map, incremental_state=state,
                   static_kv=True, need_head_weights=True) for t in range(steps)]


@pytest.mark.parametrize("layout", [document_map, every_slot_map])
@pytest.mark.parametrize("beam", [1, 3])
def test_attention_by_document_through_sdpa_equals_the_dense_scores(beam, layout):
    """Eq. 5 as one SDPA attention per document mixed by the SOD weights gives the outputs
    and document weights of the dense score matrix and hierarchical_softmax, with padding
    keys and missing documents, in a full pass and step by step with beams sharing a cluster;
    documents packed, or each in a slot of its own with padding between them."""
    module = cross_attention_module()
    doc_map = layout(SIZES)  # (3, src_len): clusters of 3, 1 and 4 documents
    rng = torch.Generator().manual_seed(1)
    memory = torch.randn(doc_map.size(1), len(SIZES), 32, generator=rng)  # (src_len, clusters, dim)
    query = torch.randn(5, len(SIZES) * beam, 32, generator=rng)  # (tgt_len, clusters x beam, dim)
    steps = None if beam == 1 else 5
    with torch.no_grad():
        fused = attend(module, query, memory, doc_map, reference=False, steps=steps)
        dense = attend(module, query, memory, doc_map, reference=True, steps=steps)
    for (out, weights), (expected_out, expected_weights) in zip(fused, dense, strict=True):
        torch.testing.assert_close(out, expected_out, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(weights, expected_weights, atol=1e-6, rtol=1e-5)
        assert bool((weights[:, beam : 2 * beam, :, 1:] == 0).all())  # the one-document cluster: missing ones get 0
