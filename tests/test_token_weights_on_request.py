"""A decoding step of HEPOS and AWESOME, whose generator reads no token weights, asks no
cross-attention for its attention weights, unless the caller names an alignment layer; the
step's output is the same either way, and a full forward pass still returns fairseq's
alignment weights (what fairseq's alignment generator reads)."""

import pytest
import torch

from builders.awesome import build_awesome
from builders.hepos import SMALL_PATTERNS, build_hepos, flat_batch, random_texts

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one CPU thread

SYSTEMS = {
    "hepos": lambda d: build_hepos(d, "--encoder-attention", "window", *SMALL_PATTERNS),
    "awesome": lambda d: build_awesome(d, "--memory", "attentive"),
}


@pytest.fixture(scope="module", params=sorted(SYSTEMS))
def system(request, copy_task_dir):
    _, task, model = SYSTEMS[request.param](copy_task_dir)
    src = flat_batch(random_texts(torch.Generator().manual_seed(1), [30, 17], task.dictionary), task.dictionary)
    return model, src[:, 0]  # (batch, src_len): one sequence, or one segment, per row


class WeightRequests:
    """Which cross-attention calls asked for attention weights, by layer."""

    def __init__(self, model):
        self.asked = []
        self.handles = [layer.encoder_attn.register_forward_pre_hook(self.record(i), with_kwargs=True)
                        for i, layer in enumerate(model.decoder.layers)]

    def record(self, index):
        def hook(module, args, kwargs):
            if kwargs.get("need_weights") or kwargs.get("need_head_weights"):
                self.asked.append(index)
        return hook

    def remove(self):
        for handle in self.handles:
            handle.remove()


def decode_steps(model, src, alignment_layer=None, beam=2, n_steps=4):
    """Steps over fixed tokens, as beam search drives the decoder: the logits and
    "attn" of every step, and the layers whose cross-attention was asked for weights."""
    model.set_beam_size(beam)
    encoder_out = model.encoder(src)
    rows = src.size(0) * beam
    tokens = torch.randint(4, 20, (rows, n_steps), generator=torch.Generator().manual_seed(3))
    state, outputs = {}, []
    requests = WeightRequests(model)
    try:
        with torch.no_grad():
            for step in range(1, n_steps + 1):
                logits, extra = model.decoder(tokens[:, :step], encoder_out=encoder_out, incremental_state=state,
                                              alignment_layer=alignment_layer)
                outputs.append((logits, extra["attn"][0]))
    finally:
        requests.remove()
    return outputs, requests.asked


def test_a_decoding_step_asks_no_cross_attention_for_weights(system):
    model, src = system
    outputs, asked = decode_steps(model, src)
    assert asked == []
    assert all(attn is None for _, attn in outputs)


def test_a_step_computes_the_same_logits_with_or_without_the_weights(system):
    """Asked for weights, the cross-attention takes its dense path (scores materialised)
    instead of SDPA: the same logits to fp32 round-off."""
    model, src = system
    last = len(model.decoder.layers) - 1
    plain, _ = decode_steps(model, src)
    weighted, asked = decode_steps(model, src, alignment_layer=last)
    assert set(asked) == {last}  # the caller named a layer: that layer, at every step
    assert all(attn is not None for _, attn in weighted)
    for (ours, _), (reference, _) in zip(plain, weighted, strict=True):
        torch.testing.assert_close(ours, reference, atol=1e-6, rtol=0)


def test_a_full_forward_pass_still_returns_the_alignment_weights(system):
    model, src = system
    prev = torch.randint(4, 20, (src.size(0), 5), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        _, extra = model.decoder(prev, encoder_out=model.encoder(src))
    attn = extra["attn"][0]  # (batch, tgt_len, src_len), the last layer's weights
    assert attn is not None and attn.shape[:2] == prev.shape
