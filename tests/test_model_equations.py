"""PageSum's equations (Eq. 5-9) hold on a tiny model, against fairseq's own BART."""

import copy

import pytest
import torch

from builders.models import (
    assert_batched_equals_alone,
    at_summary_positions,
    bart_twin,
    build_tiny,
    decoder_input,
    log_probs,
    paged_batch,
    random_pages,
)
from pagesum_plugin.systems.pagesum.model import CONFIDENCE_KEYS


@pytest.fixture(scope="module")
def tiny(copy_task_dir):
    args, task, model = build_tiny(copy_task_dir)
    return args, task, model


def vocab_range(task):
    return task.dictionary.nspecial, len(task.dictionary) - 8


def test_one_page_equals_fairseq_bart_log_probs(tiny):
    args, task, model = tiny
    bart = bart_twin(args, task, model)
    rng = torch.Generator().manual_seed(1)
    low, high = vocab_range(task)
    pages = [random_pages(rng, 1, low, high)[0] for _ in range(3)]
    src = paged_batch([[p] for p in pages], task.dictionary)  # (3, 1, len)
    _, prev = decoder_input([[5, 6, 7, 8], [9, 10], [11, 12, 13]], task.dictionary)

    ours, _ = log_probs(model, src, prev)
    bart_src = src[:, 0, :]  # plain BART reads the page as an ordinary source
    bart_logits, _ = bart(bart_src, bart_src.ne(task.dictionary.pad()).sum(1), prev)
    reference = torch.log_softmax(bart_logits.float(), dim=-1)
    pad = task.dictionary.pad()
    torch.testing.assert_close(at_summary_positions(ours, prev, pad), at_summary_positions(reference, prev, pad),
                               atol=1e-5, rtol=0)


def test_permuting_pages_changes_nothing(tiny):
    _, task, model = tiny
    rng = torch.Generator().manual_seed(2)
    pages = random_pages(rng, 4, *vocab_range(task))
    _, prev = decoder_input([[5, 6, 7, 8, 9]], task.dictionary)
    original, extra = log_probs(model, paged_batch([pages], task.dictionary), prev)
    order = [2, 0, 3, 1]
    permuted, extra_p = log_probs(model, paged_batch([[pages[i] for i in order]], task.dictionary), prev)
    torch.testing.assert_close(permuted, original, atol=1e-5, rtol=0)
    # each page keeps its own weight wherever it sits
    torch.testing.assert_close(extra_p["page_weights"][0], extra["page_weights"][0][order], atol=1e-6, rtol=0)


def test_padding_pages_change_nothing(tiny):
    _, task, model = tiny
    rng = torch.Generator().manual_seed(3)
    pages = random_pages(rng, 2, *vocab_range(task))
    _, prev = decoder_input([[5, 6, 7]], task.dictionary)
    plain, _ = log_probs(model, paged_batch([pages], task.dictionary), prev)
    padded_src = paged_batch([pages], task.dictionary, max_pages=6)  # 4 all-padding pages
    padded, extra = log_probs(model, padded_src, prev)
    torch.testing.assert_close(padded, plain, atol=0, rtol=0)
    assert extra["page_weights"].shape[1] == 2, "padding pages are dropped before any compute"


def test_example_alone_equals_example_in_mixed_batch(tiny):
    _, task, model = tiny
    rng = torch.Generator().manual_seed(4)
    low, high = vocab_range(task)
    examples = [random_pages(rng, n, low, high) for n in (3, 1, 5, 2)]
    summaries = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 16], [17]]
    assert_batched_equals_alone(model, examples, summaries, task.dictionary)


def test_page_weights_sum_to_one_over_real_pages_and_zero_on_padding(tiny):
    _, task, model = tiny
    rng = torch.Generator().manual_seed(5)
    low, high = vocab_range(task)
    examples = [random_pages(rng, n, low, high) for n in (1, 4, 2)]
    _, prev = decoder_input([[5, 6], [7, 8, 9], [10]], task.dictionary)
    _, extra = log_probs(model, paged_batch(examples, task.dictionary), prev)
    weights = extra["page_weights"]  # (batch, max_pages, tgt_len)
    assert weights.shape[:2] == (3, 4)
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(3, weights.size(2)), atol=1e-6, rtol=0)
    for i, n in enumerate((1, 4, 2)):
        assert torch.all(weights[i, n:] == 0.0)
        assert torch.all(weights[i, :n] > 0.0)
    assert torch.all(weights[0, 0] == 1.0), "a single page takes all the weight"


def test_mixing_happens_in_hidden_space_before_the_output_projection(tiny):
    _, task, model = tiny
    rng = torch.Generator().manual_seed(6)
    pages = random_pages(rng, 3, *vocab_range(task))
    _, prev = decoder_input([[5, 6, 7]], task.dictionary)
    src = paged_batch([pages], task.dictionary)
    logits, extra = model(src, None, prev)
    # recompute Eq. 7-9 by hand from each page decoded alone
    encoder_out = model.encoder(src)
    hidden, _ = model.decoder.extract_features(prev.repeat(3, 1), encoder_out=encoder_out)  # (3, tgt, d)
    conf = model.decoder.page_confidence(hidden).squeeze(-1)  # (3, tgt)
    weights = torch.softmax(conf, dim=0)
    mixed = (weights.unsqueeze(-1) * hidden).sum(0, keepdim=True)
    torch.testing.assert_close(logits, model.decoder.output_layer(mixed), atol=1e-5, rtol=0)
    torch.testing.assert_close(extra["page_weights"][0], weights, atol=1e-6, rtol=0)


def test_gradients_reach_confidence_layer_and_every_bart_parameter(tiny):
    args, task, model = tiny
    model.train()
    try:
        rng = torch.Generator().manual_seed(7)
        low, high = vocab_range(task)
        examples = [random_pages(rng, n, low, high) for n in (3, 2)]
        target, prev = decoder_input([[5, 6, 7, 8], [9, 10, 11]], task.dictionary)
        logits, _ = model(paged_batch(examples, task.dictionary), None, prev)
        loss = torch.nn.functional.cross_entropy(
            logits.view(-1, logits.size(-1)), target.view(-1), ignore_index=task.dictionary.pad()
        )
        model.zero_grad()
        loss.backward()
        without_grad = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
        assert without_grad == []
        assert model.decoder.page_confidence.weight.grad.abs().sum() > 0
    finally:
        model.zero_grad()
        model.eval()


def test_global_decoding_with_one_page_equals_page_decoding(copy_task_dir, tiny):
    _, task, model = tiny
    _, _, global_model = build_tiny(copy_task_dir, "--page-decoding", "global")
    global_model.load_state_dict(model.state_dict())
    rng = torch.Generator().manual_seed(8)
    low, high = vocab_range(task)
    src = paged_batch([random_pages(rng, 1, low, high), random_pages(rng, 1, low, high)], task.dictionary)
    _, prev = decoder_input([[5, 6, 7], [8, 9]], task.dictionary)
    page_lp, _ = log_probs(model, src, prev)
    global_lp, _ = log_probs(global_model, src, prev)
    torch.testing.assert_close(global_lp, page_lp, atol=1e-5, rtol=0)


def test_global_decoding_attends_to_all_pages_at_once(copy_task_dir, tiny):
    """With several pages, global decoding equals BART on the concatenated page encodings."""
    args, task, model = tiny
    _, _, global_model = build_tiny(copy_task_dir, "--page-decoding", "global")
    global_model.load_state_dict(model.state_dict())
    rng = torch.Generator().manual_seed(9)
    pages = random_pages(rng, 3, *vocab_range(task))
    _, prev = decoder_input([[5, 6, 7]], task.dictionary)
    global_lp, _ = log_probs(global_model, paged_batch([pages], task.dictionary, max_pages=5), prev)

    bart = bart_twin(args, task, model)
    encodings = [bart.encoder(paged_batch([[p]], task.dictionary)[:, 0]) for p in pages]
    memory = torch.cat([e["encoder_out"][0] for e in encodings], dim=0)  # (sum_len, 1, d)
    encoder_out = {"encoder_out": [memory], "encoder_padding_mask": [torch.zeros(1, memory.size(0), dtype=torch.bool)]}
    logits, _ = bart.decoder(prev, encoder_out=encoder_out)
    torch.testing.assert_close(global_lp, torch.log_softmax(logits, -1), atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_masking_is_finite_and_normalised(tiny, dtype):
    _, task, model = tiny
    rng = torch.Generator().manual_seed(10)
    low, high = vocab_range(task)
    src = paged_batch([random_pages(rng, 3, low, high), random_pages(rng, 1, low, high)], task.dictionary)
    _, prev = decoder_input([[5, 6, 7], [8]], task.dictionary)
    half_model = copy.deepcopy(model).to(dtype)
    logits, extra = half_model(src, None, prev)
    assert torch.isfinite(logits).all()
    weights = extra["page_weights"]
    assert weights.dtype == torch.float32
    torch.testing.assert_close(weights.sum(1), torch.ones_like(weights.sum(1)), atol=1e-5, rtol=0)
    assert torch.all(weights[1, 1:] == 0)


def test_confidence_layer_is_the_only_new_weight(tiny):
    args, task, model = tiny
    bart_keys = set(bart_twin(args, task, model).state_dict())
    new_keys = set(model.state_dict()) - bart_keys
    assert new_keys == set(CONFIDENCE_KEYS)
    assert bart_keys <= set(model.state_dict())


def test_activation_checkpointing_gives_the_same_loss_and_gradients(copy_task_dir, tiny):
    _, task, model = tiny
    _, _, checkpointed = build_tiny(copy_task_dir, "--checkpoint-activations")
    checkpointed.load_state_dict(model.state_dict())
    rng = torch.Generator().manual_seed(11)
    low, high = vocab_range(task)
    src = paged_batch([random_pages(rng, 3, low, high), random_pages(rng, 2, low, high)], task.dictionary)
    target, prev = decoder_input([[5, 6, 7, 8], [9, 10]], task.dictionary)

    def loss_and_grads(m):
        m.train()
        m.zero_grad()
        logits, _ = m(src, None, prev)
        loss = torch.nn.functional.cross_entropy(
            logits.view(-1, logits.size(-1)), target.view(-1), ignore_index=task.dictionary.pad()
        )
        loss.backward()
        grads = {n: p.grad.clone() for n, p in m.named_parameters()}
        m.zero_grad()
        m.eval()
        return loss.detach(), grads

    loss, grads = loss_and_grads(model)
    loss_ckpt, grads_ckpt = loss_and_grads(checkpointed)
    torch.testing.assert_close(loss_ckpt, loss, atol=1e-6, rtol=0)
    assert grads_ckpt.keys() == grads.keys()
    for name in grads:
        torch.testing.assert_close(grads_ckpt[name], grads[name], atol=1e-6, rtol=1e-5)
