"""The plugin's criterion takes the loss a chunk of summary tokens at a time
(``--loss-chunk-tokens``) and gives what the criterion on the whole batch's logits gives: loss
and NLL to 1e-5 in fp32, every parameter gradient to 1e-4 (relative), the same accuracy and
page-weight metrics, with padding pages and padded summaries, for every system whose recipes
train with it (PageSum, HED, HEPOS, AWESOME and full-attention BART), whether or not the chunk
divides the target."""

import pytest
import torch

from builders.awesome import build_awesome
from builders.hed import build_hed
from builders.hepos import SMALL_PATTERNS, build_hepos, flat_batch, random_texts
from builders.models import assert_gradients_close, build_tiny, decoder_input, paged_batch, random_pages, vocab
from pagesum_plugin.architectures import LOSS_CHUNK_TOKENS
from pagesum_plugin.chunked_loss import chunked_label_smoothed_nll_loss
from pagesum_plugin.criterions.paged_cross_entropy import PagedLabelSmoothedCrossEntropy, compiled_chunk_step
from pagesum_recipes.profiling import CountedGraphs
from benchmarks.common import Launched
from benchmarks.compiled_training import launched_outside_compiled

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one CPU thread

SUMMARIES = [[10, 11], [12, 13, 14, 15], [16], [5, 6, 7, 8, 9]]  # 4 x 7 target tokens, padded to the last
TARGET_TOKENS = 4 * 7
CHUNK = 3  # divides neither the target's length (7) nor the batch's tokens (28)


def pages(task, counts, seed=0):
    rng = torch.Generator().manual_seed(seed)
    return paged_batch([random_pages(rng, n, *vocab(task.dictionary)) for n in counts], task.dictionary)


def flat_source(task):
    return flat_batch(random_texts(torch.Generator().manual_seed(1), [40, 17, 33, 9], task.dictionary), task.dictionary)


SYSTEMS = {
    # name: (build(data_dir) -> (args, task, model), source(task) -> src_tokens)
    "pagesum": (lambda d: build_tiny(d), lambda task: pages(task, (3, 1, 4, 2))),  # padding pages
    "pagesum-global": (lambda d: build_tiny(d, "--page-decoding", "global"), lambda task: pages(task, (3, 1, 4, 2))),
    "hed": (lambda d: build_hed(d), lambda task: pages(task, (2, 3, 1, 2), seed=2)),  # documents as pages
    "hepos": (lambda d: build_hepos(d, "--encoder-attention", "window", *SMALL_PATTERNS), flat_source),
    "awesome": (lambda d: build_awesome(d, "--memory", "attentive"), lambda task: flat_source(task)[:, 0]),
    # recipes/config/bart_full_attention.yaml: the hepos model with both attentions full, fairseq's BART
    "bart": (lambda d: build_hepos(d, "--encoder-attention", "full", "--cross-attention", "full"), flat_source),
}


@pytest.fixture(scope="module", params=sorted(SYSTEMS))
def system(request, copy_task_dir):
    """(name, task, model in training mode without dropout, sample with padded summaries)."""
    build, source = SYSTEMS[request.param]
    _, task, model = build(copy_task_dir)
    pad = task.dictionary.pad()
    src = source(task)
    target, prev = decoder_input(SUMMARIES, task.dictionary)
    assert target.eq(pad).any() and target.numel() == TARGET_TOKENS
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(pad).view(src.size(0), -1).sum(1),
                            "prev_output_tokens": prev},
              "target": target, "ntokens": int(target.ne(pad).sum())}
    return request.param, task, model.train(), sample


def criterion(task, chunk, **settings):
    options = dict(sentence_avg=False, label_smoothing=0.1, ignore_prefix_size=0, report_accuracy=True)
    options.update(settings)
    return PagedLabelSmoothedCrossEntropy(task, loss_chunk_tokens=chunk, **options)


def compiled_criterion(task, chunk, backend="aot_eager", **settings):
    """``criterion`` with its chunks compiled (``compile_chunks``, as ``--compile-layers`` does):
    on the CPU through ``aot_eager``, the graph inductor compiles on CUDA, run without generated code."""
    compiled = criterion(task, chunk, **settings)
    torch._dynamo.reset()
    compiled.compile_chunks(backend)
    return compiled


def loss_and_grads(model, criterion, sample):
    """(loss, sample_size, logging output, {parameter: gradient}) of one training step."""
    torch.manual_seed(0)  # the same noise wherever a model draws any in training
    model.zero_grad(set_to_none=True)
    loss, sample_size, logging = criterion(model, sample)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), sample_size, logging, grads


def assert_same_step(chunked, full):
    loss, sample_size, logging, grads = chunked
    expected_loss, expected_size, expected_logging, expected_grads = full
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=0)
    torch.testing.assert_close(logging["nll_loss"], expected_logging["nll_loss"], rtol=1e-5, atol=0)
    assert sample_size == expected_size
    assert logging.keys() == expected_logging.keys()
    for key in ("n_correct", "total", "page_entropy_sum", "top_page_weight_sum", "ntokens", "nsentences"):
        if key in expected_logging:
            assert torch.equal(torch.as_tensor(logging[key]), torch.as_tensor(expected_logging[key])), key
    assert_gradients_close(grads, expected_grads)


def test_chunked_loss_gradients_and_metrics_equal_the_whole_batchs_logits(system):
    name, task, model, sample = system
    full = loss_and_grads(model, criterion(task, 0), sample)
    assert_same_step(loss_and_grads(model, criterion(task, CHUNK), sample), full)
    if name.startswith("pagesum") or name == "hed":
        assert "page_entropy_sum" in full[2]  # the page-weight metrics were compared


def test_ignore_prefix_size_and_sentence_avg_apply_to_the_chunks_as_to_the_whole(system):
    _, task, model, sample = system
    settings = dict(ignore_prefix_size=1, sentence_avg=True)
    full = loss_and_grads(model, criterion(task, 0, **settings), sample)
    assert full[1] == len(SUMMARIES)
    assert_same_step(loss_and_grads(model, criterion(task, CHUNK, **settings), sample), full)


def test_validation_without_gradients_gives_the_same_loss(system):
    _, task, model, sample = system
    model.eval()
    try:
        with torch.no_grad():
            chunked, _, _ = criterion(task, CHUNK)(model, sample)
            full, _, _ = criterion(task, 0)(model, sample)
    finally:
        model.train()
    torch.testing.assert_close(chunked, full, rtol=1e-5, atol=0)


def test_no_projection_onto_the_vocabulary_sees_more_rows_than_a_chunk(system, monkeypatch):
    """The whole batch's (tokens, vocabulary) logits never exist: every product with the output
    projection's weight, in forward and in backward, takes at most one chunk of tokens, and
    each chunk is projected once."""
    _, task, model, sample = system
    rows = count_projected_rows(model, monkeypatch)
    loss_and_grads(model, criterion(task, CHUNK), sample)
    assert sorted(rows) == CHUNKED_PROJECTIONS


CHUNKS = [CHUNK] * (TARGET_TOKENS // CHUNK) + [TARGET_TOKENS % CHUNK]  # 9 chunks of 3 tokens and one of 1
CHUNKED_PROJECTIONS = sorted(CHUNKS * 2)  # each chunk's logits, and its features' gradient


def count_projected_rows(model, monkeypatch):
    """A list that gets the number of token rows of every product with the output projection's
    weight from now on (``F.linear`` in forward, ``@`` in the chunks' backward)."""
    weight, rows = model.decoder.output_projection.weight, []
    linear, matmul = torch.nn.functional.linear, torch.Tensor.__matmul__

    def counted_linear(x, w, *args, **kwargs):
        if w is weight:
            rows.append(x.shape[:-1].numel())
        return linear(x, w, *args, **kwargs)

    def counted_matmul(a, b):
        if b is weight:  # a (rows, vocab) gradient times the weight
            rows.append(a.shape[0])
        return matmul(a, b)

    monkeypatch.setattr(torch.nn.functional, "linear", counted_linear)
    monkeypatch.setattr(torch.Tensor, "__matmul__", counted_matmul)
    return rows


def test_a_dummy_batchs_loss_is_zeroed_in_place_and_gives_zero_gradients(system):
    """fairseq's trainer runs a rank that has no batch left on a dummy one and zeroes its loss
    in place (``loss *= 0``) before backward, so that data-parallel ranks stay in step."""
    name, task, model, sample = system
    model.zero_grad(set_to_none=True)
    loss, _, _ = criterion(task, CHUNK)(model, sample)
    loss *= 0
    loss.backward()
    assert all(not p.grad.any() for p in model.parameters() if p.grad is not None)


def test_a_chunk_as_long_as_the_target_or_longer_is_one_chunk(system):
    _, task, model, sample = system
    whole = loss_and_grads(model, criterion(task, TARGET_TOKENS), sample)
    longer = loss_and_grads(model, criterion(task, 10 * TARGET_TOKENS), sample)
    assert torch.equal(whole[0], longer[0])
    assert all(torch.equal(grad, longer[3][key]) for key, grad in whole[3].items())
    assert_same_step(whole, loss_and_grads(model, criterion(task, 0), sample))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_chunk_launches_a_fixed_handful_of_operators(dtype):
    """Eager, every chunk is launched from the host, and a training batch of long summaries has
    many (a batch of 8 summaries of 1,024 tokens: 128 chunks of 64). A chunk keeps what the sums
    need of its rows, summed once after the last chunk, and takes its logits' gradient in closed
    form: 16 operators in fp32 and 18 in bf16, views included, forward and backward, where it
    launched 41 when it summed as it went."""
    weight = torch.randn(500, 16, dtype=dtype, requires_grad=True)

    def operators(tokens):
        features = torch.randn(tokens, 16, dtype=dtype, requires_grad=True)
        target = torch.randint(4, 500, (tokens,))
        with Launched() as counted:
            loss, _, _ = chunked_label_smoothed_nll_loss(features, weight, None, target, 0.1, 1, 4,
                                                         count_correct=False)
            loss.backward()
        return counted.operators

    per_chunk = (operators(4 * 11) - operators(4)) / 10
    assert per_chunk <= (16 if dtype == torch.float32 else 18)


def test_a_compiled_chunk_gives_the_eager_loss_metrics_and_gradients_with_one_graph_for_every_chunk(system):
    """The last chunk (1 token of 3) is padded to the others' shape with padding tokens, which
    add nothing: one graph, compiled once, runs all 10 chunks."""
    _, task, model, sample = system
    eager = loss_and_grads(model, criterion(task, CHUNK), sample)
    graphs = CountedGraphs("aot_eager")
    assert_same_step(loss_and_grads(model, compiled_criterion(task, CHUNK, graphs), sample), eager)
    assert graphs.compiled == 1 and graphs.calls[0] == len(CHUNKS)


def test_a_compiled_chunk_validates_and_trains_under_bf16_autocast_as_the_eager_one(system):
    _, task, model, sample = system
    model.eval()
    try:
        with torch.no_grad():
            validated = [c(model, sample)[2] for c in (criterion(task, CHUNK), compiled_criterion(task, CHUNK))]
    finally:
        model.train()
    for key in ("loss", "nll_loss", "n_correct"):
        torch.testing.assert_close(validated[1][key], validated[0][key], rtol=1e-5, atol=0, msg=key)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected_loss, _, _, expected_grads = loss_and_grads(model, criterion(task, CHUNK), sample)
        loss, _, _, grads = loss_and_grads(model, compiled_criterion(task, CHUNK), sample)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-2, atol=0)
    scale = max(float(g.abs().max()) for g in expected_grads.values())
    for key, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[key], rtol=5e-2, atol=1e-2 * scale, msg=key)


def test_a_compiled_chunk_launches_two_operators_from_the_host():
    """The compiled call and its share of the weight's gradient, accumulated in place outside
    the graph (``chunked_loss.chunk_step`` says why); eager, a chunk launches 16 to 18."""
    weight = torch.randn(500, 16, requires_grad=True)
    step = compiled_chunk_step("aot_eager")

    def operators(tokens):
        features = torch.randn(tokens, 16, requires_grad=True)
        target = torch.randint(4, 500, (tokens,))

        def loss_step():
            loss, _, _ = chunked_label_smoothed_nll_loss(features, weight, None, target, 0.1, 1, 4,
                                                         count_correct=False, step=step)
            loss.backward()

        torch._dynamo.reset()
        loss_step()  # compiles
        return launched_outside_compiled(loss_step)

    per_chunk = (operators(4 * 11 - 1) - operators(4 - 1)) / 10  # the last chunk padded, in both
    assert per_chunk == 2


def test_the_criterion_chunks_by_default_and_refuses_a_negative_chunk(copy_task_dir):
    args, task, _ = build_tiny(copy_task_dir)
    assert task.build_criterion(args).loss_chunk_tokens == LOSS_CHUNK_TOKENS > 0
    args, task, _ = build_tiny(copy_task_dir, "--loss-chunk-tokens", "3")  # fairseq's flag reaches the criterion
    assert task.build_criterion(args).loss_chunk_tokens == 3
    with pytest.raises(ValueError, match="--loss-chunk-tokens must be 0 \\(off\\) or more, got -1"):
        criterion(task, -1)


def test_bf16_chunked_loss_and_gradients_equal_the_whole_batchs_to_bf16_precision(system):
    _, task, model, sample = system
    weights = {key: value.clone() for key, value in model.state_dict().items()}
    half = model.to(torch.bfloat16)
    try:
        loss, _, _, grads = loss_and_grads(half, criterion(task, CHUNK), sample)
        expected_loss, _, _, expected_grads = loss_and_grads(half, criterion(task, 0), sample)
    finally:
        model.float().load_state_dict(weights)
    torch.testing.assert_close(loss, expected_loss, rtol=2e-2, atol=0)
    scale = max(float(g.abs().max()) for g in expected_grads.values())
    for key, grad in grads.items():
        torch.testing.assert_close(grad.float(), expected_grads[key].float(), rtol=5e-2, atol=2e-2 * scale, msg=key)


def test_under_bf16_autocast_the_loss_is_chunked_and_equals_the_whole_batchs_to_bf16_precision(system, monkeypatch):
    """bf16 has fp32's range: under a bf16 autocast (``torch.autocast(device, dtype=torch.bfloat16)``)
    the chunks' gradients, taken before any loss scale, do not underflow, so the criterion chunks."""
    _, task, model, sample = system
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected_loss, _, _, expected_grads = loss_and_grads(model, criterion(task, 0), sample)
        rows = count_projected_rows(model, monkeypatch)
        loss, _, _, grads = loss_and_grads(model, criterion(task, CHUNK), sample)
    assert sorted(rows) == CHUNKED_PROJECTIONS
    torch.testing.assert_close(loss, expected_loss, rtol=2e-2, atol=0)
    assert grads.keys() == expected_grads.keys()
    scale = max(float(g.abs().max()) for g in expected_grads.values())
    for key, grad in grads.items():
        assert grad.dtype == torch.float32, key  # autocast keeps the weights, and their gradients, in fp32
        torch.testing.assert_close(grad, expected_grads[key], rtol=5e-2, atol=2e-2 * scale, msg=key)


def test_fp16_takes_the_whole_logits_whose_gradient_the_loss_scale_keeps_from_underflowing(system, monkeypatch):
    """In fp16, weights (``--fp16``) or autocast (``--amp``), the chunks' gradients, taken
    before the loss scale is known, would underflow."""
    _, task, model, sample = system
    calls = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **kw: calls.append(kw.get("features_only", False)) or forward(*a, **kw))
    weights = {key: value.clone() for key, value in model.state_dict().items()}
    try:
        with torch.no_grad():
            criterion(task, CHUNK)(model.half(), sample)
    finally:
        model.float().load_state_dict(weights)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        criterion(task, CHUNK)(model, sample)
    with torch.no_grad():
        criterion(task, CHUNK)(model, sample)
    assert calls == [False, False, True]  # fp16 weights, fp16 autocast: the whole logits; fp32: the chunks
