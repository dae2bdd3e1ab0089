"""What only a GPU can show: decoding and page masking in half precision, the decoder's training
self-attention on the flash kernel, the n-gram blocker on CUDA tensors, ``adamw_torch``'s fused CUDA
update over the fp32 masters it keeps, PageSum's (page and global decoding), HED's and AWESOME's
training passes captured as CUDA graphs, and the scale benchmark's CUDA paths at a tiny size (the GPU kit
runs these tests before the bart.large row groups). Every test here is skipped, with the reason,
where torch sees no CUDA device; docs/benchmarks/gpu.md says where they last ran."""

import copy
import math

import pytest
import torch
from fairseq import utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.modules import MultiheadAttention
from fairseq.optim.adafactor import Adafactor
from fairseq.optim.fp16_optimizer import MemoryEfficientFP16Optimizer
from torch._C._autograd import DeviceType
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmarks.common import Backward, Launched, criterion_and_sample
from benchmarks.scale import results
from benchmarks.scale.cli import main as scale
from benchmarks.scale.cli import parse_args
from benchmarks.scale.kernels import durations
from builders.awesome import (MEMORY_OPTIONS, build_awesome, ended_apart, first_segments, randomize_memories,
                              segment_criterion)
from builders.models import (assert_gradients_close, build_tiny, decoder_input, log_probs, make_source_sensitive,
                             paged_batch)
from builders.systems import SUMMARIES, TRAINED_SYSTEMS, pages
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.generation.ngram_blocking import ban_repeated_ngrams
from pagesum_plugin.generation.ngram_blocking import NoRepeatNGramBlocker
from pagesum_plugin.modules.decoder_self_attention import DecoderSelfAttention
from pagesum_plugin.optim.adafactor_batched import BatchedAdafactor
from pagesum_plugin.systems.awesome.captured_segments import CapturedSegments
from pagesum_plugin.training_capture import CapturedTraining

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch sees none)")

HALF = [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")]


def half_model(copy_task_dir, dtype):
    """A tiny PageSum whose summaries depend on its pages, on the GPU in ``dtype``."""
    _, task, model = build_tiny(copy_task_dir)
    make_source_sensitive(model, task.dictionary)
    return task, model.to(device="cuda", dtype=dtype)


@pytest.mark.parametrize("dtype", HALF)
def test_half_precision_batched_decoding_equals_one_document_at_a_time(copy_task_dir, dtype):
    task, model = half_model(copy_task_dir, dtype)
    task.load_dataset("test")
    dataset = task.datasets["test"]
    indices = list(range(8))
    generator = PageSumSequenceGenerator([model], task.dictionary, beam_size=4, max_len_b=30, no_repeat_ngram_size=3)
    batched = generator.generate([model], utils.move_to_cuda(dataset.collater([dataset[i] for i in indices])))
    for i, hypos in zip(indices, batched):
        alone = generator.generate([model], utils.move_to_cuda(dataset.collater([dataset[i]])))[0]
        assert torch.equal(hypos[0]["tokens"], alone[0]["tokens"])
        torch.testing.assert_close(hypos[0]["positional_scores"], alone[0]["positional_scores"], atol=5e-2, rtol=0)


@pytest.mark.parametrize("dtype", HALF)
def test_half_precision_page_masking_with_padding_pages_gives_no_nan(copy_task_dir, dtype):
    """Padding pages are masked out of the page softmax (Eq. 8) without NaN or inf in fp16
    and bf16, and get exactly zero weight."""
    task, model = half_model(copy_task_dir, dtype)
    d = task.dictionary
    examples = [[[10, 11, 12], [13, 14]], [[15, 16, 17, 18]]]  # 2 and 1 real pages
    src = paged_batch(examples, d, max_pages=7).cuda()  # 5 and 6 padding pages
    _, prev = decoder_input([[20, 21, 22], [23]], d)
    with torch.no_grad():
        lprobs, extra = log_probs(model, src, prev.cuda())
    real = prev.cuda().ne(d.pad())
    assert bool(torch.isfinite(lprobs[real]).all())
    weights = extra["page_weights"]  # (batch, pages, tgt_len)
    assert bool(torch.isfinite(weights).all())
    assert bool((weights[0, 2:] == 0).all()) and bool((weights[1, 1:] == 0).all())


def test_the_decoders_training_self_attention_runs_on_the_flash_kernel_and_equals_fairseqs():
    """With only the flash kernel allowed (which takes no mask), the full pass over right-padded
    summaries runs, and equals fairseq's attention in bf16 at every position a loss reads."""
    torch.manual_seed(0)
    ours = DecoderSelfAttention(128, 4, self_attention=True).to(device="cuda", dtype=torch.bfloat16)
    stock = MultiheadAttention(128, 4, self_attention=True).to(device="cuda", dtype=torch.bfloat16)
    stock.load_state_dict(ours.state_dict())
    x = torch.randn(64, 3, 128, device="cuda", dtype=torch.bfloat16)  # (tgt_len, rows, dim)
    padding = torch.zeros(3, 64, dtype=torch.bool, device="cuda")
    padding[1, 40:] = True  # a shorter summary, right-padded
    causal = torch.triu(torch.full((64, 64), -math.inf, device="cuda", dtype=torch.bfloat16), 1)  # as fairseq's
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        out = ours(x, x, x, key_padding_mask=padding, attn_mask=causal, need_weights=False)[0]
    expected = stock(x, x, x, key_padding_mask=padding, attn_mask=causal, need_weights=False)[0]
    real = ~padding.t()[:, :, None]  # (tgt_len, rows, 1)
    torch.testing.assert_close((out * real).float(), (expected * real).float(), atol=2e-2, rtol=2e-2)


def test_the_ngram_blocker_on_cuda_bans_what_it_bans_on_the_cpu():
    """fairseq's CUDA kernel where it is built, our tensor blocker otherwise: the same bans."""
    rng = torch.Generator().manual_seed(0)
    rows, step, vocab = 12, 40, 9  # a small vocabulary, so that n-grams repeat
    history = torch.randint(4, vocab, (rows, step + 1), generator=rng)
    buffer = torch.cat([history, torch.ones(rows, 8, dtype=torch.long)], dim=1)  # padding past the step
    lprobs = torch.randn(rows, vocab, generator=rng)
    for n in (2, 3, 4):
        expected = ban_repeated_ngrams(history, lprobs.clone(), n)
        blocker = NoRepeatNGramBlocker(n)
        banned = blocker(buffer.cuda(), lprobs.clone().cuda(), rows // 4, 4, step)
        assert torch.equal(banned.cpu().isinf(), expected.isinf()), f"n = {n}"
        assert bool(expected.isinf().any()), "the history must repeat some n-gram"


# Every row group of the scale benchmark at pagesum_tiny's dimensions and tiny lengths
SCALE_TINY = ["--device", "cuda", "--tiny", "--pages", "2", "--page-len", "32", "--tgt-len", "8", "--growth-pages", "1",
              "2", "--growth-tgt-len", "8", "--mfu-pages", "2", "--max-batch", "2", "--decode-pages", "2", "--out-lens",
              "4", "8", "--batches", "1", "2", "--top-pages", "1", "--production-len-cap", "8", "--repeats", "1",
              "--train-updates", "5", "--fidelity-docs", "8"]


# One test per group, so that the GPU kit's test processes share them (one test of all 11 took
# 164 s of the fifth visit's 193)
SCALE_GROUPS = [group.id for group in parse_args(SCALE_TINY).groups]


@pytest.mark.parametrize("group", SCALE_GROUPS)
def test_every_scale_row_group_runs_on_cuda_and_reads_the_gpus_memory(tmp_path, group):
    path = str(tmp_path / "scale.jsonl")
    assert scale([*SCALE_TINY, "--rows", group, "--results", path]) == 0
    records = results.read(path)
    (run,) = [r for r in records if r["type"] == "run"]
    assert run["group"] == group and run["status"] == "done" and run["gpu"]
    measured = [r for r in records if r["type"] == "measurement"]
    assert measured and all(r["status"] == "ok" for r in measured)
    if run["row"] == "1":
        update = measured[0]
        assert update["device"] >= update["reserved"] >= update["allocated"] > 0
    if run["row"] == "4":
        assert all(r["reserved"] >= r["allocated"] > 0 for r in measured)


def test_the_raw_events_kernel_seconds_are_the_profilers_own_device_times():
    """Rows 3 and 4 read a profile's kernel times from its raw events (``kernels.durations``), not
    from ``key_averages``: the same seconds, kernel by kernel."""
    x = torch.randn(512, 512, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        (x @ x).relu().softmax(-1).sum()
        torch.cuda.synchronize()
    own = {event.key: event.self_device_time_total * 1e-6 for event in profile.key_averages()
           if event.self_device_time_total > 0}
    seconds = durations(profile, DeviceType.CUDA)
    assert len(own) >= 3 and set(seconds) == set(own)
    for name, total in own.items():
        assert seconds[name] == pytest.approx(total, rel=1e-3, abs=2e-6), name


def test_adafactor_batched_updates_on_cuda_as_fairseqs_adafactor_in_a_few_kernels(copy_task_dir):
    """``adafactor_batched`` on the GPU: three updates of a tiny PageSum's fp32 weights on the same
    gradients land where fairseq's Adafactor puts them on the GPU, to fp32 rounding (the batched
    reductions may add in another order); under ``--memory-efficient-bf16`` an update as the
    trainer makes it launches as few kernels as on the CPU (``test_optim_adafactor_batched.py``)
    and leaves finite weights."""
    args, _, model = build_tiny(copy_task_dir, "--optimizer", "adafactor_batched", "--memory-efficient-bf16",
                                "--lr", "1e-3")
    options = dict(lr=1e-3, beta1=0.9, weight_decay=0.01)
    weights = {}
    for optimizer_class in (Adafactor, BatchedAdafactor):
        params = list(copy.deepcopy(model).cuda().parameters())
        extra = dict(scale_parameter=False, relative_step=False) if optimizer_class is Adafactor else {}
        optimizer = optimizer_class(params, **options, **extra)
        generator = torch.Generator().manual_seed(0)
        for _ in range(3):
            for p in params:
                p.grad = torch.randn(p.shape, generator=generator).cuda()
            optimizer.step()
        weights[optimizer_class] = torch.cat([p.detach().reshape(-1) for p in params]).cpu()
    torch.testing.assert_close(weights[BatchedAdafactor], weights[Adafactor], atol=1e-6, rtol=1e-5)
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert (weights[BatchedAdafactor] - start).abs().max() > 1e-4

    params = list(copy.deepcopy(model).to(device="cuda", dtype=torch.bfloat16).parameters())
    optimizer = MemoryEfficientFP16Optimizer.build_optimizer(convert_namespace_to_omegaconf(args), params)
    for p in params:
        p.grad = torch.randn_like(p)
    with Launched() as counted:
        optimizer.multiply_grads(1 / 7)
        optimizer.clip_grad_norm(1.0)
        optimizer.step()
    assert counted.kernels <= 400 and all(torch.isfinite(p).all() for p in params)


def test_adamw_torch_keeps_its_fp32_masters_on_cuda_as_on_the_cpu(copy_task_dir):
    """``adamw_torch`` under ``--memory-efficient-bf16`` on the GPU (torch's fused CUDA AdamW over
    the fp32 masters it keeps, a bucket's bf16 gradients converted at once): given the same
    gradients, three updates as the trainer makes them land where the CPU's fused kernel lands, to
    fp32 rounding, and an update launches a few kernels, as many as at any depth on the CPU
    (``test_optim_adamw_torch.py``)."""
    args, _, model = build_tiny(copy_task_dir, "--optimizer", "adamw_torch", "--memory-efficient-bf16", "--lr",
                                "1e-3", "--weight-decay", "0.01")
    cfg = convert_namespace_to_omegaconf(args)
    masters, kernels = {}, {}
    for device in ("cpu", "cuda"):
        params = list(copy.deepcopy(model).to(device=device, dtype=torch.bfloat16).parameters())
        optimizer = MemoryEfficientFP16Optimizer.build_optimizer(cfg, params)
        generator = torch.Generator().manual_seed(0)
        for _ in range(3):
            optimizer.zero_grad()
            for p in params:
                p.grad = torch.randn(p.shape, generator=generator).to(device=device, dtype=torch.bfloat16)
            with Launched() as counted:
                optimizer.multiply_grads(1 / 7)
                optimizer.clip_grad_norm(1.0)
                optimizer.step()
        kernels[device] = counted.kernels
        masters[device] = torch.cat([optimizer.optimizer.state[p]["master"].reshape(-1) for p in params]).cpu()
    torch.testing.assert_close(masters["cuda"], masters["cpu"], atol=1e-6, rtol=0)
    assert (masters["cpu"] - torch.cat([p.detach().float().reshape(-1) for p in model.parameters()])).abs().max() > 1e-3
    assert kernels["cuda"] <= 24, kernels


def cuda_training_batch(task, summaries, page_counts):
    """The criterion (the loss 3 summary tokens at a time) and a sample on the GPU."""
    target, prev = decoder_input(summaries, task.dictionary)
    return criterion_and_sample(task, pages(task, page_counts).cuda(), target.cuda(), prev.cuda(), 3)


@pytest.mark.parametrize("name", ["pagesum", "pagesum-global", "hed"])
def test_a_captured_training_pass_gives_the_eager_losses_and_gradients_update_after_update(name, copy_task_dir):
    """``--capture-training``: batches of two shapes with padding pages or documents (every slot
    run, padding ones masked), the weights moving between updates, and two micro-batches accumulated
    into one update, replayed from CUDA graphs, against the same steps eager (packed pages or
    documents) on a copy of the model (fp32, no dropout)."""
    build, _ = TRAINED_SYSTEMS[name]
    _, task, model = build(copy_task_dir)
    model = make_source_sensitive(model, task.dictionary).cuda().train()
    eager_model = copy.deepcopy(model)
    shifted = [[t + 20 for t in summary] for summary in SUMMARIES]
    criterion, first = cuda_training_batch(task, SUMMARIES, (3, 1, 4, 2))
    _, same_shape = cuda_training_batch(task, shifted, (3, 1, 4, 2))
    _, other_shape = cuda_training_batch(task, SUMMARIES, (2, 5, 1, 2))  # 5 page slots, not 4
    captured = CapturedTraining(criterion)
    updates = [[first], [same_shape], [other_shape], [first, same_shape], [other_shape]]  # the 4th: --update-freq 2
    for micro_batches in updates:
        grads = []
        for m, step in ((model, lambda s: captured.train_step(model, s, Backward)),
                        (eager_model, lambda s: Backward.backward(criterion(eager_model, s)[0]))):
            m.zero_grad(set_to_none=True)
            for sample in micro_batches:
                step(sample)
            grads.append({name: p.grad.clone() for name, p in m.named_parameters() if p.grad is not None})
            with torch.no_grad():
                for p in m.parameters():
                    if p.grad is not None:
                        p -= 0.05 * p.grad
        assert grads[0].keys() == grads[1].keys()
        assert_gradients_close(grads[0], grads[1], rtol=1e-4)  # every slot run against packed pages: rounding
    assert len(captured.shapes) == 2
    for p, q in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("memory", list(MEMORY_OPTIONS))
def test_awesomes_captured_segments_give_the_eager_steps_losses_and_gradients_update_after_update(memory,
                                                                                                  copy_task_dir):
    """``--capture-training`` for AWESOME, either memory: documents ending at different segments,
    each of the three segment passes replayed from CUDA graphs, batches of one shape with other
    tokens or fewer segments, two micro-batches in one update, the weights moving between updates,
    against the task's eager step on a copy of the model (fp32, no dropout)."""
    _, task, model = build_awesome(copy_task_dir, *MEMORY_OPTIONS[memory])
    model = randomize_memories(model).cuda().train()
    eager_model = copy.deepcopy(model)
    criterion = segment_criterion(task)
    first, other = (utils.move_to_cuda(ended_apart(task.dictionary, shift)) for shift in (0, 10))
    two_segments = first_segments(first, 2)
    captured = CapturedSegments(criterion, eager=task.train_segments)
    for micro_batches in [[first], [other], [two_segments], [first, other]]:  # the 4th: --update-freq 2
        grads, losses = [], []
        for m, step in ((model, lambda s: captured.train_step(model, s, Backward)),
                        (eager_model, lambda s: task.train_segments(s, eager_model, criterion, Backward, False))):
            m.zero_grad(set_to_none=True)
            losses.append([step(sample)[0] for sample in micro_batches])
            grads.append({name: p.grad.clone() for name, p in m.named_parameters() if p.grad is not None})
            with torch.no_grad():
                for p in m.parameters():
                    if p.grad is not None:
                        p -= 0.05 * p.grad
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-5)
        assert_gradients_close(grads[0], grads[1], rtol=1e-4)  # empty segments run against rows dropped: rounding
    assert len(captured.shapes) == 3
    for p, q in zip(model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4)
