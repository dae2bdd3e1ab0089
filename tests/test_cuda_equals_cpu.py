"""On CUDA in fp32, every system computes what it computes on the CPU: beam search finds the
same hypotheses (tokens exactly, scores to 1e-4), with beams and examples ending apart and
trigram blocking, and one training step gives the CPU's loss (1e-5 relative) and every
parameter's gradient (1e-4 relative to the largest, the parameter named when one differs).
With every layer and the loss's chunk compiled by inductor (``--compile-layers``, the default
on CUDA), a training step through the plugin's criterion gives the eager one's loss and
gradients. Decoding captured as a CUDA graph per step (the default on CUDA) finds the step loop's
hypotheses, also with a graph for each length of the caches it reads and with the batch cut down
to the examples not done, and in half precision replays bit for bit what its steps compute op by
op.
Skipped, with the reason, where torch sees no CUDA device; the GPU kit runs them."""

import pytest
import torch
from fairseq import utils

from builders.models import assert_gradients_close, decoder_input
from builders.stock import assert_same_hypotheses
from builders.systems import SEARCHED_SYSTEMS, SUMMARIES, build_system, loss_and_grads, trained_system
from pagesum_plugin.criterions.paged_cross_entropy import PagedLabelSmoothedCrossEntropy
from pagesum_plugin.generation import static_search
from pagesum_plugin.generation.static_search import CapturedStep, FixedShapeSearch
from pagesum_plugin.modules.compiled_layers import compile_model_layers

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch sees none)")

DEVICE = "cuda"
COUNTS = (3, 1, 4, 2, 1)  # pages, documents or segments of each example
SEARCHES = {
    "beams-end-apart": dict(beam_size=4, min_len=2, max_len_b=25),
    "lenpen-trigrams": dict(beam_size=4, len_penalty=2.0, max_len_b=30, no_repeat_ngram_size=3),
}


@pytest.fixture(autouse=True)
def exact_float32_matmuls():
    """fp32 matrix products in full fp32 on the GPU (no TF32), as on the CPU."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def on_cpu(hypos):
    return [[utils.apply_to_sample(lambda t: t.cpu(), h) for h in n_best] for n_best in hypos]


@pytest.mark.parametrize("settings", SEARCHES.values(), ids=SEARCHES.keys())
@pytest.mark.parametrize("name", SEARCHED_SYSTEMS)
def test_beam_search_on_cuda_finds_the_cpus_hypotheses(name, settings, copy_task_dir):
    system = build_system(name, copy_task_dir)
    sample = system.make_sample(COUNTS, seed=1)
    with torch.no_grad():
        expected = system.generator(**settings).generate([system.model], sample)
        system.model.to(DEVICE)
        found = system.generator(**settings).generate([system.model], utils.move_to_cuda(sample))
    assert_same_hypotheses(on_cpu(found), expected, atol=1e-4)
    lengths = [len(h["tokens"]) for n_best in expected for h in n_best]
    assert len(set(lengths)) > 1, "hypotheses of different lengths: beams ended at different steps"


@pytest.mark.parametrize("name", SEARCHED_SYSTEMS)
def test_a_training_step_on_cuda_gives_the_cpus_loss_and_every_gradient(name, copy_task_dir):
    task, model, src = trained_system(name, copy_task_dir)
    target, prev = decoder_input(SUMMARIES, task.dictionary)
    pad = task.dictionary.pad()
    model.train()
    expected_loss, expected_grads = loss_and_grads(model, src, prev, target, pad)
    loss, grads = loss_and_grads(model.to(DEVICE), src.to(DEVICE), prev.to(DEVICE), target.to(DEVICE), pad)
    torch.testing.assert_close(loss.cpu(), expected_loss, atol=0, rtol=1e-5)
    assert_gradients_close({key: grad.cpu() for key, grad in grads.items()}, expected_grads)


def test_a_training_step_with_the_layers_and_the_loss_chunk_compiled_by_inductor_gives_the_eager_one(copy_task_dir):
    """The plugin's criterion, 3 summary tokens a chunk (the last chunk padded); fp32."""
    task, model, src = trained_system("pagesum", copy_task_dir)
    target, prev = (t.to(DEVICE) for t in decoder_input(SUMMARIES, task.dictionary))
    sample = {"net_input": {"src_tokens": src.to(DEVICE), "src_lengths": None, "prev_output_tokens": prev},
              "target": target, "ntokens": int(target.ne(task.dictionary.pad()).sum())}
    criterion = PagedLabelSmoothedCrossEntropy(task, sentence_avg=False, label_smoothing=0.1, loss_chunk_tokens=3)
    model = model.to(DEVICE).train()

    def step():
        torch.manual_seed(0)
        model.zero_grad(set_to_none=True)
        loss, _, _ = criterion(model, sample)
        loss.backward()
        return loss.detach().cpu(), {name: p.grad.cpu() for name, p in model.named_parameters() if p.grad is not None}

    expected_loss, expected_grads = step()
    torch._dynamo.reset()
    compile_model_layers(model)
    criterion.compile_chunks()
    loss, grads = step()
    torch.testing.assert_close(loss, expected_loss, atol=0, rtol=1e-5)
    assert_gradients_close(grads, expected_grads)


def captured_search(system, sample, **settings):
    """(hypotheses, the step's graphs) of a search whose steps are captured as a CUDA graph."""
    graphs = []

    def capture(step):
        graphs.append(CapturedStep(step))
        return graphs[-1]

    with torch.no_grad():
        return system.generator(decoding=capture, **settings).generate([system.model], sample), graphs


@pytest.mark.parametrize("settings", SEARCHES.values(), ids=SEARCHES.keys())
@pytest.mark.parametrize("name", SEARCHED_SYSTEMS)
def test_captured_decoding_on_cuda_finds_the_step_loops_hypotheses(name, settings, copy_task_dir):
    system = build_system(name, copy_task_dir)
    sample = utils.move_to_cuda(system.make_sample(COUNTS, seed=2))
    system.model.to(DEVICE)
    with torch.no_grad():
        expected = system.generator(decoding="eager", **settings).generate([system.model], sample)
    found, graphs = captured_search(system, sample, **settings)
    assert_same_hypotheses(on_cpu(found), on_cpu(expected), atol=1e-4)
    searches = max(COUNTS) if name == "awesome" else 1  # AWESOME searches each segment on its own
    assert len(graphs) == searches and graphs[0].graph is not None and graphs[0].calls > 3, \
        "each search's steps replayed one graph"


@pytest.mark.parametrize("name", ["pagesum", "bart"])
def test_captured_steps_of_several_read_lengths_share_one_pool_and_find_the_step_loops_hypotheses(
        name, copy_task_dir, monkeypatch):
    """Buckets of 4 positions: a search of 20 to 25 tokens captures a graph for each length it
    reads, in one memory pool, and replays each in turn. (Rehearsed on the CPU with the capture
    replaced by a counter: 7 lengths, each run 3 or 4 times, the step loop's tokens.)"""
    monkeypatch.setattr(static_search, "READ_BUCKET", 4)
    made = []

    def recorded(step, pool=None):
        made.append(CapturedStep(step, pool))
        return made[-1]

    monkeypatch.setattr(static_search, "CapturedStep", recorded)
    system = build_system(name, copy_task_dir)
    sample = utils.move_to_cuda(system.make_sample(COUNTS, seed=2))
    system.model.to(DEVICE)
    settings = dict(beam_size=4, min_len=20, max_len_b=25)  # summaries long enough for 7 lengths
    with torch.no_grad():
        expected = system.generator(decoding="eager", **settings).generate([system.model], sample)
        found = system.generator(decoding="graph", **settings).generate([system.model], sample)
    assert_same_hypotheses(on_cpu(found), on_cpu(expected), atol=1e-4)
    # a length's step runs once as it is, is captured at its second call, and replayed from the third
    replayed = [step for step in made if step.graph is not None and step.calls > 2]
    assert len(replayed) > 2, "several lengths read, each a graph replayed"
    assert len({id(step.pool) for step in made}) == 1 and made[0].pool is not None


@pytest.mark.parametrize("name", ["pagesum", "bart"])
def test_a_captured_search_cut_down_captures_the_smaller_batchs_steps_and_finds_the_step_loops_hypotheses(
        name, copy_task_dir, monkeypatch):
    """Once at most half the examples are left, the batch is cut down to them, and the smaller
    batch's steps are captured and replayed in the search's one pool. (Rehearsed on the CPU with
    the capture replaced by a counter: two cuts, each followed by a graph replayed.)"""
    made, cuts, cut_down = [], [], FixedShapeSearch._cut_down

    def recorded(step, pool=None):
        made.append(CapturedStep(step, pool))
        return made[-1]

    def cutting(*args, **kwargs):
        cuts.append(len(made))  # the steps made before the cut
        return cut_down(*args, **kwargs)

    monkeypatch.setattr(static_search, "CapturedStep", recorded)
    monkeypatch.setattr(FixedShapeSearch, "_cut_down", cutting)
    system = build_system(name, copy_task_dir)
    sample = utils.move_to_cuda(system.make_sample(COUNTS, seed=2))
    system.model.to(DEVICE)
    with torch.no_grad():
        expected = system.generator(decoding="eager", **SEARCHES["lenpen-trigrams"]).generate([system.model], sample)
        found = system.generator(decoding="graph", **SEARCHES["lenpen-trigrams"]).generate([system.model], sample)
    assert_same_hypotheses(on_cpu(found), on_cpu(expected), atol=1e-4)
    assert cuts, "examples ended apart, and the batch was cut down"
    assert any(step.graph is not None and step.calls > 2 for step in made[cuts[0]:]), "the smaller batch replayed"
    assert len({id(step.pool) for step in made}) == 1 and made[0].pool is not None


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_captured_half_precision_decoding_replays_exactly_what_the_steps_compute_op_by_op(dtype, copy_task_dir):
    system = build_system("pagesum", copy_task_dir)
    sample = utils.move_to_cuda(system.make_sample(COUNTS, seed=2))
    system.model.to(device=DEVICE, dtype=dtype)
    settings = SEARCHES["lenpen-trigrams"]
    with torch.no_grad():
        expected = system.generator(decoding="static", **settings).generate([system.model], sample)
    found, graphs = captured_search(system, sample, **settings)
    assert graphs[0].graph is not None
    assert_same_hypotheses(on_cpu(found), on_cpu(expected), atol=0)


def test_on_cuda_the_steps_are_captured_by_default(copy_task_dir):
    system = build_system("pagesum", copy_task_dir)
    sample = utils.move_to_cuda(system.make_sample(COUNTS, seed=2))
    assert system.generator(beam_size=4)._fixed_shapes(sample, None, None) == "graph"
    assert system.generator(beam_size=4, decoding="eager")._fixed_shapes(sample, None, None) is None
