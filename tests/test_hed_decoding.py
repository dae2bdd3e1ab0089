"""HED decodes batches of clusters of any shape: incrementally, in beams, one at a time or
batched, with the same summary distribution whatever the order of the documents."""

import pytest
import torch

from builders.hed import build_hed
from builders.models import (
    assert_batched_equals_alone,
    assert_incremental_equals_full,
    decoder_input,
    log_probs,
    make_source_sensitive,
    paged_batch,
    random_pages,
    vocab,
)
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator

DOC_COUNTS = (2, 1, 4, 3)  # the longest cluster (the first) has fewer documents than another
SUMMARIES = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16], [17]]


@pytest.fixture(scope="module")
def hed(copy_task_dir):
    _, task, model = build_hed(copy_task_dir)
    return task, make_source_sensitive(model, task.dictionary)


def clusters(task, seed=0):
    rng = torch.Generator().manual_seed(seed)
    low, high = vocab(task.dictionary)
    result = [random_pages(rng, n, low, high, min_len=2) for n in DOC_COUNTS]
    result[0] = [doc * 3 for doc in result[0]]
    return result


def test_incremental_decoding_equals_the_full_forward_pass(hed):
    task, model = hed
    src = paged_batch(clusters(task), task.dictionary)
    _, prev = decoder_input(SUMMARIES, task.dictionary)
    assert_incremental_equals_full(model, src, prev, task.dictionary.pad())


def test_a_batch_of_clusters_equals_each_cluster_alone(hed):
    task, model = hed
    examples = clusters(task, 1)
    assert_batched_equals_alone(model, examples, SUMMARIES, task.dictionary)


def test_permuting_the_documents_leaves_the_summary_distribution_unchanged(hed):
    task, model = hed
    cluster = clusters(task, 2)[2]  # four documents
    order = [3, 1, 0, 2]
    _, prev = decoder_input([SUMMARIES[2]], task.dictionary)
    original, extra = log_probs(model, paged_batch([cluster], task.dictionary), prev)
    permuted, extra_p = log_probs(model, paged_batch([[cluster[i] for i in order]], task.dictionary), prev)
    torch.testing.assert_close(permuted, original, atol=1e-5, rtol=0)
    # every document keeps its own weight wherever it sits
    torch.testing.assert_close(extra_p["page_weights"][0], extra["page_weights"][0][order], atol=1e-6, rtol=0)


def test_padding_documents_change_nothing(hed):
    task, model = hed
    examples = clusters(task, 3)
    _, prev = decoder_input(SUMMARIES, task.dictionary)
    plain, _ = log_probs(model, paged_batch(examples, task.dictionary), prev)
    padded, extra = log_probs(model, paged_batch(examples, task.dictionary, max_pages=7), prev)
    torch.testing.assert_close(padded, plain, atol=0, rtol=0)
    assert extra["page_weights"].size(1) == max(DOC_COUNTS), "padding documents are dropped before any compute"


def sample_of(src, dictionary):
    return {"id": torch.arange(src.size(0)), "net_input": {"src_tokens": src, "src_lengths": src.ne(dictionary.pad()).sum((1, 2))}}


def teacher_forced_scores(model, dictionary, src_tokens, tokens):
    """log p(token_t | tokens_<t) of a full forward pass, for one hypothesis of one cluster."""
    prev = torch.cat([tokens.new_tensor([dictionary.eos()]), tokens[:-1]]).unsqueeze(0)
    lprobs, extra = log_probs(model, src_tokens, prev)
    return lprobs[0].gather(1, tokens.unsqueeze(1)).squeeze(1), extra["page_weights"][0].t()


def test_beam_search_scores_equal_teacher_forced_log_probs(hed):
    """Beams share one cached copy of each cluster, clusters finish at different steps:
    every reported score and document weight is still the full forward pass's."""
    task, model = hed
    examples = clusters(task, 4)
    src = paged_batch(examples, task.dictionary)
    hypos = PageSumSequenceGenerator([model], task.dictionary, beam_size=4, max_len_b=25).generate(
        [model], sample_of(src, task.dictionary))
    lengths = {len(h[0]["tokens"]) for h in hypos}
    assert len(lengths) > 1, "the probe must finish clusters at different steps"
    for i, example_hypos in enumerate(hypos):
        for hypo in example_hypos:
            scores, weights = teacher_forced_scores(model, task.dictionary, src[i: i + 1, : len(examples[i])], hypo["tokens"])
            torch.testing.assert_close(hypo["positional_scores"], scores, atol=1e-4, rtol=0)
            torch.testing.assert_close(hypo["page_weights"], weights, atol=1e-4, rtol=0)
            assert hypo["page_weights"].shape == (len(hypo["tokens"]), len(examples[i]))


def test_beam_search_batched_equals_each_cluster_alone(hed):
    task, model = hed
    examples = clusters(task, 5)
    generator = PageSumSequenceGenerator([model], task.dictionary, beam_size=3, max_len_b=20, no_repeat_ngram_size=2)
    batched = generator.generate([model], sample_of(paged_batch(examples, task.dictionary), task.dictionary))
    for cluster, hypos in zip(examples, batched):
        alone = generator.generate([model], sample_of(paged_batch([cluster], task.dictionary), task.dictionary))[0]
        assert [h["tokens"].tolist() for h in hypos] == [h["tokens"].tolist() for h in alone]
        for h, a in zip(hypos, alone):
            torch.testing.assert_close(h["score"], a["score"], atol=1e-5, rtol=0)


def test_beams_with_their_own_copy_of_the_encoder_states_decode_the_same(copy_task_dir):
    """fairseq's default layout (the encoder output repeated for every beam and reordered
    with it) gives the same hypotheses as beams sharing one copy per cluster."""
    _, task, model = build_hed(copy_task_dir)
    make_source_sensitive(model, task.dictionary)
    sample = sample_of(paged_batch(clusters(task, 6), task.dictionary), task.dictionary)
    key_rows = []
    handle = model.decoder.layers[0].encoder_attn.register_forward_hook(
        lambda m, args, kwargs, out: key_rows.append(kwargs["key"].size(1)), with_kwargs=True)
    shared = PageSumSequenceGenerator([model], task.dictionary, beam_size=4, max_len_b=25).generate([model], sample)
    assert key_rows[0] == len(DOC_COUNTS), "one copy of the encoder states per cluster"

    key_rows.clear()
    generator = PageSumSequenceGenerator([model], task.dictionary, beam_size=4, max_len_b=25)
    del model.encoder.reorder_encoder_out  # undo set_beam_size: the encoder output is reordered per beam
    repeated = generator.generate([model], sample)
    handle.remove()
    assert key_rows[0] == 4 * len(DOC_COUNTS), "every beam had its own rows"
    for ours, theirs in zip(shared, repeated):
        assert [h["tokens"].tolist() for h in ours] == [h["tokens"].tolist() for h in theirs]
        for h, r in zip(ours, theirs):
            torch.testing.assert_close(h["positional_scores"], r["positional_scores"], atol=1e-5, rtol=0)
