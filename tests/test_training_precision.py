"""Training with activation checkpointing (``--checkpoint-activations``, which the GovReport
recipes use) computes exactly what training without it does, and bf16 training with it
(``--bf16``: model and criterion cast to bf16, as fairseq's trainer does) computes what fp32
training does within bf16's precision."""

import pytest
import torch

from builders.models import build_tiny, make_source_sensitive

BF16_UNIT = 2.0**-8  # bf16 keeps 8 significant bits: one rounding is off by at most this, relatively


@pytest.fixture(scope="module")
def batch(copy_task_dir):
    """A training batch of the copy task: examples of 1 to 4 pages, summaries of different lengths."""
    _, task, _ = build_tiny(copy_task_dir)
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    sample = dataset.collater([dataset[i] for i in range(6)])
    assert len(set(sample["net_input"]["src_tokens"][:, :, 0].ne(task.dictionary.pad()).sum(1).tolist())) > 1
    return sample


def model_and_criterion(data_dir, *flags, dtype=torch.float32, weights=None):
    """A tiny PageSum model and its training criterion, as fairseq's trainer sets them up
    for ``--bf16``: both cast to the training dtype."""
    args, task, model = build_tiny(data_dir, "--label-smoothing", "0.1", *flags)
    if weights is not None:
        model.load_state_dict(weights)
    criterion = task.build_criterion(args)
    return model.to(dtype), criterion.to(dtype)


def loss_and_gradients(model, criterion, sample, seed=0):
    """One forward and backward pass in training mode, of the loss per target token as fairseq's
    trainer normalises it; the loss and every parameter's gradient in fp32."""
    model.train()
    model.zero_grad()
    torch.manual_seed(seed)  # the same dropout masks for every model
    loss, sample_size, _ = criterion(model, sample)
    loss = loss / sample_size
    loss.backward()
    gradients = {name: p.grad.float().clone() for name, p in model.named_parameters()}
    model.zero_grad()
    model.eval()
    return loss.detach().float(), gradients


def test_checkpointed_activations_train_exactly_as_stored_ones_for_several_updates_with_dropout(copy_task_dir, batch):
    plain, criterion = model_and_criterion(copy_task_dir, "--dropout", "0.1")
    checkpointed, _ = model_and_criterion(copy_task_dir, "--dropout", "0.1", "--checkpoint-activations",
                                          weights=plain.state_dict())
    # plain SGD: every update moves the weights by exactly lr x gradient, so differences stay visible
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (plain, checkpointed)]
    for update in range(3):
        (loss, grads), (loss_ckpt, grads_ckpt) = (loss_and_gradients(m, criterion, batch, seed=update)
                                                  for m in (plain, checkpointed))
        torch.testing.assert_close(loss_ckpt, loss, atol=1e-6, rtol=0)
        assert grads_ckpt.keys() == grads.keys()
        for name in grads:
            torch.testing.assert_close(grads_ckpt[name], grads[name], atol=1e-6, rtol=0, msg=name)
        for model, gradients, optimizer in zip((plain, checkpointed), (grads, grads_ckpt), optimizers):
            for name, p in model.named_parameters():
                p.grad = gradients[name]
            optimizer.step()
    for (name, p), q in zip(plain.named_parameters(), checkpointed.parameters()):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=0, msg=name)


# Softmax ignores a constant added to all its scores, so a bias that adds the same amount to
# every score of a softmax (an attention's key bias, the page confidence's bias) has a zero
# gradient: what either precision computes for it is rounding noise.
SHIFT_INVARIANT = ("k_proj.bias", "page_confidence.bias")


def test_bf16_training_with_checkpointed_activations_gives_fp32s_loss_and_gradients_within_bf16_precision(
    copy_task_dir, batch
):
    reference, criterion = model_and_criterion(copy_task_dir)
    # pages whose decoder states differ by more than bf16 resolves, as a trained model's do
    make_source_sensitive(reference, criterion.task.target_dictionary)
    bf16, bf16_criterion = model_and_criterion(copy_task_dir, "--checkpoint-activations", dtype=torch.bfloat16,
                                               weights=reference.state_dict())
    loss, grads = loss_and_gradients(reference, criterion, batch)
    loss_bf16, grads_bf16 = loss_and_gradients(bf16, bf16_criterion, batch)
    assert bf16.decoder.layers[0].self_attn.k_proj.weight.dtype == torch.bfloat16

    # The loss is a sum of fp32 log-probabilities of bf16 logits: a few roundings.
    torch.testing.assert_close(loss_bf16, loss, atol=0, rtol=4 * BF16_UNIT)
    # Every layer adds roundings forward and backward: each parameter's gradient is a few
    # percent off (measured: 1.2% for the median parameter, 8.4% at most, the page
    # confidence's). A lost gradient or a wrong mask is off by 100%.
    for name, g in grads.items():
        if name.endswith(SHIFT_INVARIANT):
            continue
        error = (grads_bf16[name] - g).norm() / g.norm()
        assert error < 32 * BF16_UNIT, f"{name}: relative gradient error {float(error):.4f}"
    every = torch.cat([g.flatten() for name, g in grads.items() if not name.endswith(SHIFT_INVARIANT)])
    every_bf16 = torch.cat([g.flatten() for name, g in grads_bf16.items() if not name.endswith(SHIFT_INVARIANT)])
    assert torch.nn.functional.cosine_similarity(every, every_bf16, dim=0) > 1 - BF16_UNIT
