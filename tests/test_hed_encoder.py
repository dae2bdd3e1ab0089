"""HED's hierarchical encoding (Section 4.1): restricted intra-document attention, position
restart, and start-of-document (SOD) tokens that link the documents."""

import pytest
import torch

from builders.hed import build_hed, dense_reference_encoder, document_sizes, hed_attention_mask
from builders.models import paged_batch, random_pages, vocab
from pagesum_plugin.systems.hed.attention import LENGTH_GROUP_RATIO, DocumentLayout, document_shapes


@pytest.fixture(scope="module")
def hed(copy_task_dir):
    return build_hed(copy_task_dir)


def clusters_of(task, seed, doc_counts, min_len=2, max_len=12):
    rng = torch.Generator().manual_seed(seed)
    return [random_pages(rng, n, *vocab(task.dictionary), min_len, max_len) for n in doc_counts]


def encode(model, clusters, dictionary, max_docs=0):
    """(batch, src_len, dim) states and (batch, src_len) document map."""
    out = model.encoder(paged_batch(clusters, dictionary, max_docs))
    return out["encoder_out"][0].transpose(0, 1), out["encoder_padding_mask"][0]


def test_block_sparse_encoder_equals_dense_masked_reference(hed):
    args, task, model = hed
    clusters = clusters_of(task, 1, (3, 1, 5, 2), max_len=20)
    clusters[2][1] = clusters[2][1] * 4  # lengths from 4 to 82 tokens: several length groups
    states, doc_map = encode(model, clusters, task.dictionary)
    for i, cluster in enumerate(clusters):
        reference = dense_reference_encoder(args, model.encoder, cluster, task.dictionary)  # (src_len, dim)
        n = reference.size(0)
        torch.testing.assert_close(states[i, :n], reference, atol=1e-5, rtol=0)
        assert bool((doc_map[i, n:] == -1).all()), "positions past the cluster are padding"


def test_the_dense_reference_differs_without_the_links_between_start_tokens(hed):
    """The SOD links of the reference are not idle: cutting them changes the states."""
    args, task, model = hed
    cluster = clusters_of(task, 2, (3,))[0]
    linked = dense_reference_encoder(args, model.encoder, cluster, task.dictionary)
    sizes = document_sizes(cluster)
    doc = torch.tensor([n for n, size in enumerate(sizes) for _ in range(size)])
    mask = hed_attention_mask(sizes)
    assert bool((mask & (doc[:, None] != doc[None, :])).any()), "the mask links documents"
    alone = [dense_reference_encoder(args, model.encoder, [d], task.dictionary) for d in cluster]
    assert not torch.allclose(linked, torch.cat(alone), atol=1e-4)


def test_positions_restart_at_zero_in_every_document(hed):
    _, task, model = hed
    cluster = clusters_of(task, 3, (4,))[0]
    layout = DocumentLayout(paged_batch([cluster], task.dictionary), task.dictionary.pad())
    assert layout.positions.tolist() == [p for size in document_sizes(cluster) for p in range(size)]
    embedded = model.encoder.embed_documents(layout)
    start = 0
    for doc in cluster:  # every document is embedded exactly as if it were alone
        alone = model.encoder.embed_documents(DocumentLayout(paged_batch([[doc]], task.dictionary), 1))
        torch.testing.assert_close(embedded[start: start + len(doc) + 2], alone, atol=0, rtol=0)
        start += len(doc) + 2


@pytest.fixture(scope="module")
def deep(copy_task_dir):
    """Three encoder layers: a word of document B reaches B's SOD in the first layer, the
    other SODs in the second, and their documents' ordinary tokens in the third."""
    return build_hed(copy_task_dir, "--encoder-layers", "3")


def reached_by_middle_document(model, cluster, dictionary, cut_sod_of_a=False):
    """reached[l]: the packed tokens whose state after encoder layer l depends on the words
    of document B (a non-zero gradient with respect to their embeddings). ``cut_sod_of_a``
    detaches A's SOD (the first packed token) after every layer."""
    captured = {"states": []}

    def keep_embeddings(module, inputs, out):
        captured["embeddings"] = out  # (n_tokens, dim)

    def keep_states(module, inputs, out):
        if cut_sod_of_a:
            out = torch.cat([out[:1].detach(), out[1:]])
        captured["states"].append(out.squeeze(1))
        return out

    handles = [model.encoder.embed_tokens.register_forward_hook(keep_embeddings)]
    handles += [layer.register_forward_hook(keep_states) for layer in model.encoder.layers]
    try:
        model.encoder(paged_batch([cluster], dictionary))
    finally:
        for handle in handles:
            handle.remove()
    a_len, b_len = len(cluster[0]) + 2, len(cluster[1]) + 2
    words_of_b = slice(a_len + 1, a_len + b_len - 1)
    probe = torch.randn(captured["embeddings"].size(1), generator=torch.Generator().manual_seed(0))
    reached = []
    for states in captured["states"]:
        tokens = []
        for t in range(states.size(0)):
            grad, = torch.autograd.grad(states[t] @ probe, captured["embeddings"], retain_graph=True)
            if bool(grad[words_of_b].ne(0).any()):
                tokens.append(t)
        reached.append(tokens)
    return reached


def test_a_document_reaches_the_others_start_tokens_before_their_ordinary_tokens(deep):
    _, task, model = deep
    cluster = clusters_of(task, 4, (3,), min_len=4)[0]
    a_len, b_len, c_len = (len(doc) + 2 for doc in cluster)
    sod_a, sod_c = 0, a_len + b_len
    b_tokens = list(range(a_len, a_len + b_len))
    reached = reached_by_middle_document(model, cluster, task.dictionary)
    assert reached[0] == b_tokens, "layer 1: B's words stay within B (its SOD included)"
    assert reached[1] == [sod_a] + b_tokens + [sod_c], "layer 2: the other SODs read B's SOD"
    assert reached[2] == list(range(a_len + b_len + c_len)), "layer 3: the SODs pass it on in their documents"


def test_other_documents_reach_ordinary_tokens_only_through_their_start_token(deep):
    """With A's SOD cut after every layer, nothing of B reaches A's ordinary tokens."""
    _, task, model = deep
    cluster = clusters_of(task, 5, (3,), min_len=4)[0]
    a_len = len(cluster[0]) + 2
    reached = reached_by_middle_document(model, cluster, task.dictionary, cut_sod_of_a=True)
    assert not set(range(1, a_len)) & set(reached[-1])
    assert set(range(a_len, a_len + len(cluster[1]) + 2)) <= set(reached[-1]), "B itself still is"


def test_permuting_the_documents_permutes_the_encoder_states(hed):
    _, task, model = hed
    cluster = clusters_of(task, 6, (4,))[0]
    order = [2, 0, 3, 1]
    states, _ = encode(model, [cluster], task.dictionary)
    permuted, _ = encode(model, [[cluster[i] for i in order]], task.dictionary)
    sizes = document_sizes(cluster)
    starts = [sum(sizes[:n]) for n in range(len(sizes))]
    expected = torch.cat([states[0, starts[i]: starts[i] + sizes[i]] for i in order])
    torch.testing.assert_close(permuted[0, : len(expected)], expected, atol=1e-5, rtol=0)


def test_padding_documents_change_nothing(hed):
    _, task, model = hed
    clusters = clusters_of(task, 7, (2, 3))
    plain, plain_map = encode(model, clusters, task.dictionary)
    padded, padded_map = encode(model, clusters, task.dictionary, max_docs=6)
    torch.testing.assert_close(padded, plain, atol=0, rtol=0)
    assert torch.equal(padded_map, plain_map)


def test_every_slot_laid_out_whole_gives_the_packed_states_of_every_real_token_and_keeps_each_documents_slot(hed):
    """The layout of a captured training pass (``EverySlotLayout``): padding documents, one of
    them between two real ones, and padding tokens stay in the packed row, and change nothing
    for the real tokens; the document map gives each real token its slot, -1 to padding."""
    _, task, model = hed
    pad = task.dictionary.pad()
    src = paged_batch(clusters_of(task, 9, (3, 3, 1)), task.dictionary, max_pages=4)  # (3, 4, doc_len)
    src[1, 1] = pad  # the second cluster's middle document is padding
    packed = model.encoder(src)
    every_slot = model.encoder(src, host_facts=model.encoder.static_host_facts(src))
    states = every_slot["encoder_out"][0].transpose(0, 1)  # (batch, max_docs * doc_len, dim)
    doc_map = every_slot["encoder_padding_mask"][0]  # (batch, max_docs * doc_len)
    slots = torch.arange(src.size(1))[None, :, None].expand_as(src)
    assert torch.equal(doc_map, torch.where(src.ne(pad), slots, -1).view(src.size(0), -1))
    assert bool(states.isfinite().all()), "padding rows stay finite"
    packed_states, packed_map = packed["encoder_out"][0].transpose(0, 1), packed["encoder_padding_mask"][0]
    for cluster in range(src.size(0)):
        torch.testing.assert_close(states[cluster][doc_map[cluster] >= 0],
                                   packed_states[cluster][packed_map[cluster] >= 0], atol=1e-5, rtol=1e-5)
    assert torch.equal(every_slot["src_lengths"][0], packed["src_lengths"][0])


def test_within_document_scores_cost_at_most_twice_the_sum_of_squared_lengths(hed):
    _, task, _ = hed
    low, _ = vocab(task.dictionary)
    lengths = [900, 3, 17, 40, 41, 64, 120, 5, 300]
    docs = [[low] * (n - 2) for n in lengths]
    layout = DocumentLayout(paged_batch([docs[:4], docs[4:]], task.dictionary), task.dictionary.pad())
    squares = sum(n * n for n in lengths)
    assert squares <= layout.within_document_cost() <= 2 * squares
    padded_to_longest = len(lengths) * max(lengths) ** 2
    assert layout.within_document_cost() < padded_to_longest / 4, "documents are not padded to the longest"


def test_documents_share_a_length_group_only_with_documents_less_than_the_ratio_apart(hed):
    """A document of n tokens joins group ceil(log_sqrt2(n)): the groups' bounds are the powers of
    sqrt(2), and a document as long as a bound (n = 2, 4, 8, 16) closes its group."""
    _, task, _ = hed
    low, _ = vocab(task.dictionary)
    lengths = [2, 3, 4, 5, 6, 8, 9, 16, 17, 23]  # tokens, <s> and </s> included
    layout = DocumentLayout(paged_batch([[[low] * (n - 2) for n in lengths]], task.dictionary), task.dictionary.pad())
    groups = [sorted(lengths[d] for d in docs.tolist()) for docs, _, _, _ in layout.groups]
    assert groups == [[2], [3, 4], [5], [6, 8], [9], [16], [17], [23]]
    for group in groups:
        assert max(group) / min(group) < LENGTH_GROUP_RATIO


def test_a_document_with_padding_before_its_end_is_refused_with_its_cluster_and_place(hed):
    _, task, _ = hed
    pad = task.dictionary.pad()
    src = paged_batch(clusters_of(task, 9, (2, 3)), task.dictionary)  # (2, 3, doc_len)
    src[1, 2, 1] = pad
    with pytest.raises(ValueError, match="document 2 of cluster 1 holds padding before its last token"):
        DocumentLayout(src, pad)


def test_the_layout_knows_on_the_host_the_document_shapes_that_its_map_gives(hed):
    """The decoder lays its keys out by every document's first column and length, and the longest; the encoder's
    layout hands them over without asking the device, so they must be what its document map
    gives, a padding document between two real ones included."""
    _, task, _ = hed
    pad = task.dictionary.pad()
    src = paged_batch(clusters_of(task, 9, (3, 3, 1)), task.dictionary)  # (3, 3, doc_len)
    src[1, 1] = pad  # the second cluster's middle document is padding
    layout = DocumentLayout(src, pad)
    starts, lengths, longest = document_shapes(layout.document_map())
    known = layout.shapes()
    assert torch.equal(known.starts, starts) and torch.equal(known.lengths, lengths) and known.longest == longest
    assert lengths[1].ne(0).tolist() == [True, True, False]  # its third document is its second now
    assert starts[1].tolist() == [0, int(lengths[1, 0]), 0]


def test_training_gradients_are_finite_with_clusters_of_one_document(hed):
    args, task, _ = hed
    _, _, model = build_hed(task.cfg.data, "--attention-dropout", "0.1")
    model.train()
    clusters = clusters_of(task, 8, (1, 3, 1))
    out = model.encoder(paged_batch(clusters, task.dictionary))
    out["encoder_out"][0].pow(2).sum().backward()
    grads = [p.grad for p in model.encoder.parameters() if p.grad is not None]
    assert grads and all(bool(torch.isfinite(g).all()) for g in grads)
