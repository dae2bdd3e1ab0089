"""Every system trains and decodes through fused attention as it did through the attention
it replaced (``reference_attention``): the loss to 1e-5 and the gradients to 1e-4 (relative)
in fp32, bf16 to its precision, and beam search gives the same hypotheses with scores to
1e-5, with padding pages, padded summaries, beams and examples finishing at different
steps, --top-pages, trigram blocking, and batches against one document at a time. The path of
before also keeps every layer norm's output and float dropout masks, so each system's training
step, with dropout too, covers the layer norms computed again in backward and the bool masks."""

import contextlib

import pytest
import torch
from fairseq.modules import FairseqDropout, MultiheadAttention

from builders.models import assert_gradients_close, build_tiny, decoder_input, make_source_sensitive
from builders.stock import assert_same_hypotheses
from builders.systems import SUMMARIES, TRAINED_SYSTEMS, loss_and_grads, pages, trained_system
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.modules.fused_attention import STEP_WEIGHTS, FusedCrossAttention
from benchmarks.reference.modules import reference_attention

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one CPU thread


@pytest.fixture(scope="module", params=sorted(TRAINED_SYSTEMS))
def system(request, copy_task_dir):
    return (request.param, *trained_system(request.param, copy_task_dir))


def assert_trains_as_before(system):
    """The training step's loss within 1e-5 and its gradients within 1e-4 (relative) of the path of before."""
    name, task, model, src = system
    target, prev = decoder_input(SUMMARIES, task.dictionary)
    model.train()
    try:
        loss, grads = loss_and_grads(model, src, prev, target, task.dictionary.pad())
        with reference_attention(model):
            expected_loss, expected_grads = loss_and_grads(model, src, prev, target, task.dictionary.pad())
    finally:
        model.eval()
    torch.testing.assert_close(loss, expected_loss, atol=1e-5, rtol=1e-6)
    assert_gradients_close(grads, expected_grads)


def test_training_loss_and_gradients_equal_the_unfused_attentions_in_fp32(system):
    assert_trains_as_before(system)


@contextlib.contextmanager
def residual_dropout(model, p: float):
    """Every dropout before a residual sum (the layers' and the embeddings'), at ``p``: not the
    attention's (SDPA and bmm + softmax draw differently) nor the activation's (a layer whose
    feed-forward is folded has none)."""
    modules = [module for parent in model.modules() if not isinstance(parent, MultiheadAttention)
               for name, module in parent.named_children() if name == "dropout_module"
               and isinstance(module, FairseqDropout)]
    before = [module.p for module in modules]
    for module in modules:
        module.p = p
    try:
        yield modules
    finally:
        for module, kept in zip(modules, before):
            module.p = kept


def test_training_with_dropout_equals_the_path_of_before_in_fp32(system):
    with residual_dropout(system[2], 0.1) as dropouts:
        assert dropouts
        assert_trains_as_before(system)  # the same seed: the same draws on both paths


def test_bf16_training_loss_equals_the_unfused_attentions_to_bf16_precision(system):
    name, task, model, src = system
    target, prev = decoder_input(SUMMARIES, task.dictionary)
    half = model.to(torch.bfloat16).train()
    try:
        loss, _ = loss_and_grads(half, src, prev, target, task.dictionary.pad())
        with reference_attention(half):
            expected_loss, _ = loss_and_grads(half, src, prev, target, task.dictionary.pad())
    finally:
        model.float().eval()
    torch.testing.assert_close(loss, expected_loss, atol=0, rtol=2e-2)


def generate(model, task, src, **settings):
    options = {"beam_size": 4, "max_len_b": 12, "min_len": 1, **settings}
    generator = PageSumSequenceGenerator([model], task.dictionary, **options)
    sample = {"id": torch.arange(src.size(0)),
              "net_input": {"src_tokens": src, "src_lengths": src.ne(task.dictionary.pad()).view(src.size(0), -1).sum(1)}}
    return generator.generate([model], sample)


def assert_decodes_as_before(model, task, src, **settings):
    if task.__class__.__name__.startswith("Segmented"):
        src = src.unsqueeze(1) if src.dim() == 2 else src
    fused = generate(model, task, src, **settings)
    with reference_attention(model):
        expected = generate(model, task, src, **settings)
    assert_same_hypotheses(fused, expected)
    return fused


@pytest.fixture(scope="module")
def sensitive(system):
    """The system made to end its beams and examples at different steps."""
    name, task, model, src = system
    if name == "awesome":  # a one-segment document per row: (batch, 1, len)
        src = src.unsqueeze(1)
    return name, task, make_source_sensitive(model, task.dictionary), src


def test_beam_search_gives_the_same_hypotheses_and_scores_as_the_unfused_attentions(sensitive):
    name, task, model, src = sensitive
    hypos = assert_decodes_as_before(model, task, src)
    if name != "awesome":  # AWESOME joins its segments' hypotheses into one
        lengths = [[len(h["tokens"]) for h in n_best] for n_best in hypos]
        assert any(len(set(n_best)) > 1 for n_best in lengths), "beams finished at different steps"
        if name != "hed":  # its tiny clusters end together
            assert len({max(n_best) for n_best in lengths}) > 1, "examples finished at different steps"


def test_trigram_blocking_decodes_as_before(sensitive):
    name, task, model, src = sensitive
    assert_decodes_as_before(model, task, src, no_repeat_ngram_size=3, max_len_b=20)


def test_a_batch_decodes_as_each_document_alone(sensitive):
    name, task, model, src = sensitive
    batched = generate(model, task, src)
    for i in range(src.size(0)):
        alone = src[i : i + 1]
        alone = alone[..., : int(alone.ne(task.dictionary.pad()).view(-1, alone.size(-1)).any(0).nonzero().max()) + 1]
        if alone.dim() == 3:
            alone = alone[:, : int(alone[0, :, 0].ne(task.dictionary.pad()).sum())]
        assert_same_hypotheses([batched[i]], generate(model, task, alone), atol=1e-4)


def test_top_pages_decodes_as_before(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir)
    model = make_source_sensitive(model, task.dictionary)
    assert_decodes_as_before(model, task, pages(task, (4, 2, 3), seed=3), top_pages=2)


def cross_attention_twins():
    """The fused encoder-decoder attention and fairseq's, with the same weights."""
    torch.manual_seed(3)
    ours = FusedCrossAttention(16, 4, kdim=16, vdim=16, encoder_decoder_attention=True)
    stock = MultiheadAttention(16, 4, kdim=16, vdim=16, encoder_decoder_attention=True)
    stock.load_state_dict(ours.state_dict())
    return ours.eval(), stock.eval()


@pytest.mark.parametrize("hooked", [False, True], ids=["plain", "query-projection-with-a-hook"])
def test_decoding_steps_of_the_cross_attention_project_through_weights_kept_for_the_search(hooked):
    """A search's steps call the query and output projections as one ``addmm`` each, the query's
    scaling folded in, through the weights transposed once for the search (views: no copy), and
    equal fairseq's attention step by step; a projection with a hook of its own (quantization
    noise's) is called as itself."""
    ours, stock = cross_attention_twins()
    calls = []
    if hooked:
        ours.q_proj.register_forward_hook(lambda module, args, out: calls.append(1))
    rng = torch.Generator().manual_seed(4)
    source = torch.randn(7, 3, 16, generator=rng)  # (src_len, rows, dim)
    padding = torch.zeros(3, 7, dtype=torch.bool)
    padding[1, 5:] = True
    ours_state, stock_state = {}, {}
    with torch.no_grad():
        for step in range(3):
            x = torch.randn(1, 3, 16, generator=rng)  # (tgt_len, rows, dim)
            out, _ = ours(x, source, source, key_padding_mask=padding, incremental_state=ours_state, static_kv=True,
                          need_weights=False)
            expected, _ = stock(x, source, source, key_padding_mask=padding, incremental_state=stock_state,
                                static_kv=True, need_weights=False)
            torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6, msg=f"step {step}")
    kept = ours.get_incremental_state(ours_state, STEP_WEIGHTS)
    assert kept["out"].data_ptr() == ours.out_proj.weight.data_ptr() and kept["out"].shape == (16, 16)
    if hooked:
        assert kept["query"] is None and len(calls) == 3
    else:
        assert kept["query"].data_ptr() == ours.q_proj.weight.data_ptr()
