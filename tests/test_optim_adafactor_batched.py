"""``--optimizer adafactor_batched``: fairseq's Adafactor, every parameter of one shape updated at
once. Under each of fairseq's options, in fp32 and bf16, each parameter lands where fairseq's
``adafactor`` puts it, bit for bit, a parameter without a gradient included; its state is
fairseq's, so checkpoints load both ways; the wrapper's factor divides the fp32 copies of the
gradients; and what the host launches for an update does not grow with the model's depth."""

import re
from types import SimpleNamespace

import pytest
import torch
from fairseq import optim
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim.adafactor import Adafactor, FairseqAdafactor
from fairseq.optim.fp16_optimizer import FP16Optimizer, MemoryEfficientFP16Optimizer

from benchmarks.common import Launched
from benchmarks.scale.training import trainer_update
from builders.cli import TRAIN_FLAGS, run_cli
from builders.models import build_tiny
from pagesum_plugin.errors import SettingError
from pagesum_plugin.optim.adafactor_batched import BatchedAdafactor

# shapes that share a bucket, one of their own, a 3-d one (factored over its last two dimensions),
# vectors (not factored) and a one-row matrix
SHAPES = [(6, 5), (6, 5), (5,), (5,), (7, 6), (3, 4, 5), (1, 5), (6, 5)]
OPTIONS = {  # fairseq's Adafactor options; fairseq's class defaults scale_parameter and relative_step to True
    "external lr": dict(lr=0.01),
    "first moment": dict(lr=0.01, beta1=0.9),
    "weight decay": dict(lr=0.01, weight_decay=0.1),
    "relative step": dict(lr=None, relative_step=True),
    "relative step, scaled by the parameter": dict(lr=None, relative_step=True, scale_parameter=True),
    "warmup init": dict(lr=None, relative_step=True, warmup_init=True),
    "clipping, decay, epsilons": dict(lr=0.01, clip_threshold=0.5, decay_rate=-0.5, eps=(1e-20, 1e-2)),
}
SKIPPED = {1, 4}  # parameters without a gradient at the second update


def parameters(dtype):
    generator = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(shape, generator=generator).to(dtype)) for shape in SHAPES]


def updated(optimizer_class, dtype, updates=3, **options):
    """The parameters after ``updates`` updates on the same random gradients, two of them left
    without a gradient at the second, and the optimizer."""
    params = parameters(dtype)
    optimizer = optimizer_class(params, **options)
    generator = torch.Generator().manual_seed(1)
    for update in range(updates):
        for i, p in enumerate(params):
            grad = torch.randn(p.shape, generator=generator).to(dtype)
            p.grad = None if update == 1 and i in SKIPPED else grad
        optimizer.step()
    return params, optimizer


def fairseqs(**options):
    return {"scale_parameter": False, "relative_step": False, **options}


@pytest.mark.parametrize("bucket_bytes", [2**20, 4 * 30 * 2], ids=["one bucket a shape", "two matrices a bucket"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("options", list(OPTIONS.values()), ids=list(OPTIONS))
def test_each_parameter_lands_where_fairseqs_adafactor_puts_it_bit_for_bit(options, dtype, bucket_bytes):
    expected, _ = updated(Adafactor, dtype, **fairseqs(**options))
    actual, optimizer = updated(BatchedAdafactor, dtype, bucket_bytes=bucket_bytes, **options)
    assert len(optimizer.buckets) == (5 if bucket_bytes == 2**20 else 6)
    for a, e in zip(actual, expected):
        assert a.dtype == dtype and torch.equal(a, e)
    assert optimizer.state[actual[1]]["step"] == 2 and optimizer.state[actual[0]]["step"] == 3


def test_the_state_is_fairseqs_and_a_checkpoint_loads_into_either_optimizer():
    """Saved after two updates by one optimizer and loaded by the other (bf16 weights: the fp32
    state stays fp32), a third update lands where three updates of fairseq's land."""
    options = dict(lr=0.01, beta1=0.9)
    expected, _ = updated(Adafactor, torch.bfloat16, **fairseqs(**options))
    for saver, loader in ((BatchedAdafactor, Adafactor), (Adafactor, BatchedAdafactor)):
        saved_params, saved = updated(saver, torch.bfloat16, updates=2, **(options if saver is BatchedAdafactor
                                                                            else fairseqs(**options)))
        params = [torch.nn.Parameter(p.detach().clone()) for p in saved_params]
        optimizer = loader(params, **(options if loader is BatchedAdafactor else fairseqs(**options)))
        optimizer.load_state_dict(saved.state_dict())
        if loader is BatchedAdafactor:
            assert {name for name in optimizer.state[params[0]]} == {"step", "exp_avg", "exp_avg_sq_row",
                                                                      "exp_avg_sq_col"}
            assert all(t.dtype == torch.float32 for s in optimizer.state.values() for t in s.values()
                       if torch.is_tensor(t))
        generator = torch.Generator().manual_seed(1)
        grads = [[torch.randn(p.shape, generator=generator).to(torch.bfloat16) for p in params] for _ in range(3)]
        for p, grad in zip(params, grads[2]):
            p.grad = grad
        optimizer.step()
        for a, e in zip(params, expected):
            assert torch.equal(a, e), (saver.__name__, loader.__name__)


def test_the_wrappers_factor_divides_the_fp32_copies_of_the_gradients_and_leaves_the_bf16_ones():
    """``step(scale=3)`` is the update of the fp32 gradients divided by 3; the bf16 gradients are
    left as backward made them (fairseq's wrapper would multiply them in place, rounding them).
    Adafactor's update hardly depends on the gradients' scale, except through its first epsilon,
    which is large here so that the division shows."""
    options = dict(lr=0.01, eps=(1e-2, 1e-3))
    grads = [torch.randn(shape).to(torch.bfloat16) for shape in SHAPES]

    def bf16_updated(scale):
        params = parameters(torch.bfloat16)
        for p, grad in zip(params, grads):
            p.grad = grad.clone()
        BatchedAdafactor(params, **options).step(scale=scale)
        return params

    scaled = bf16_updated(3.0)
    assert all(torch.equal(p.grad, grad) for p, grad in zip(scaled, grads))
    divided = [torch.nn.Parameter(p.detach().float()) for p in parameters(torch.bfloat16)]
    for p, grad in zip(divided, grads):
        p.grad = grad.float() / 3
    BatchedAdafactor(divided, **options).step()
    assert all(torch.equal(p, r.to(torch.bfloat16)) for p, r in zip(scaled, divided))
    unscaled = bf16_updated(1.0)
    assert not all(torch.equal(p, u) for p, u in zip(scaled, unscaled))


@pytest.mark.parametrize("step_flags", [["--relative-step", "--scale-parameter", "--warmup-init"], []],
                         ids=["relative step", "external lr"])
def test_every_flag_reaches_the_update_as_it_reaches_fairseqs_adafactor(copy_task_dir, step_flags):
    """fairseq's passes --lr along even with a relative step, which its Adafactor then refuses, so
    its arguments are read without building it; this one passes None there."""
    flags = ["--lr", "0.003", "--adafactor-eps", "(1e-29, 2e-3)", "--clip-threshold", "0.5", "--decay-rate", "-0.7",
             "--beta1", "0.8", "--weight-decay", "0.02", *step_flags]
    fairseq_args, _, _ = build_tiny(copy_task_dir, "--optimizer", "adafactor", *flags)
    fairseqs_config = FairseqAdafactor.optimizer_config.fget(SimpleNamespace(args=fairseq_args))
    args, _, model = build_tiny(copy_task_dir, "--optimizer", "adafactor_batched", *flags)
    optimizer = optim.build_optimizer(convert_namespace_to_omegaconf(args).optimizer, list(model.parameters()))
    assert optimizer.optimizer_config == {**fairseqs_config, "lr": None if step_flags else 0.003}
    assert fairseqs_config["eps"] == (1e-29, 2e-3) and fairseqs_config["relative_step"] is bool(step_flags)


def test_scale_parameter_without_relative_step_is_refused_in_one_line():
    with pytest.raises(SettingError, match=r"--scale-parameter needs --relative-step"):
        BatchedAdafactor(parameters(torch.float32), lr=0.01, scale_parameter=True)


@pytest.mark.parametrize("text", ["1e-30", "(1e-30, small)", "(1e-30,"])
def test_epsilons_that_are_not_a_pair_of_numbers_are_refused_in_one_line(copy_task_dir, text):
    args, _, model = build_tiny(copy_task_dir, "--optimizer", "adafactor_batched", "--adafactor-eps", text)
    with pytest.raises(SettingError, match=re.escape(f"--adafactor-eps {text}: not a pair of numbers")):
        optim.build_optimizer(convert_namespace_to_omegaconf(args).optimizer, list(model.parameters()))


@pytest.fixture
def batch(copy_task_batch):
    return copy_task_batch


def bf16_model_and_optimizer(data_dir, optimizer_name, *flags):
    """A tiny bf16 PageSum (the same weights every call) and its optimizer under fairseq's
    ``--memory-efficient-bf16`` wrapper, built from fairseq's options."""
    args, task, model = build_tiny(data_dir, "--optimizer", optimizer_name, "--lr", "1e-3",
                                   "--memory-efficient-bf16", *flags)
    model = model.to(torch.bfloat16)
    cfg = convert_namespace_to_omegaconf(args)
    optimizer = MemoryEfficientFP16Optimizer.build_optimizer(cfg, [p for p in model.parameters() if p.requires_grad])
    return model, task.build_criterion(args).to(torch.bfloat16), optimizer


def test_a_bf16_pagesum_under_fairseqs_wrapper_updates_as_with_fairseqs_adafactor(copy_task_dir, batch):
    """Three updates as the trainer makes them, with a factor of 1 (no clipping, the loss over
    one token): the same bf16 weights, bit for bit, as ``--optimizer adafactor``."""
    weights = {}
    for name in ("adafactor", "adafactor_batched"):
        model, criterion, optimizer = bf16_model_and_optimizer(copy_task_dir, name)
        model.train()
        for _ in range(3):
            optimizer.zero_grad()
            torch.manual_seed(0)  # the same dropout masks for both
            loss, _, _ = criterion(model, batch)
            trainer_update(optimizer, loss, 1, clip_norm=0.0)
        weights[name] = [p.detach().clone() for p in model.parameters()]
    assert all(torch.equal(a, e) for a, e in zip(weights["adafactor_batched"], weights["adafactor"]))
    assert isinstance(optimizer.optimizer, BatchedAdafactor)


def test_under_fairseqs_bf16_wrapper_the_fp32_masters_update_as_with_fairseqs_adafactor(copy_task_dir, batch):
    """``--bf16``: fairseq's wrapper keeps fp32 master weights, whose gradients take the trainer's
    factor (1 / sample size, the clipping) in place, as for fairseq's Adafactor; that wrapper never
    resets a factor that it hands to ``step`` instead, so across updates it would compound. Three
    updates as the trainer makes them: the same masters, bit for bit."""
    masters = {}
    for name in ("adafactor", "adafactor_batched"):
        args, task, model = build_tiny(copy_task_dir, "--optimizer", name, "--lr", "1e-3", "--bf16")
        model, criterion = model.to(torch.bfloat16), task.build_criterion(args).to(torch.bfloat16)
        optimizer = FP16Optimizer.build_optimizer(convert_namespace_to_omegaconf(args), list(model.parameters()))
        model.train()
        for _ in range(3):
            optimizer.zero_grad()
            torch.manual_seed(0)  # the same dropout masks for both
            loss, sample_size, _ = criterion(model, batch)
            trainer_update(optimizer, loss, sample_size, clip_norm=0.1)
        masters[name] = [p.detach().clone() for p in optimizer.fp32_params]
    assert all(torch.equal(a, e) for a, e in zip(masters["adafactor_batched"], masters["adafactor"]))


def test_an_update_launches_as_many_kernels_at_any_depth(copy_task_dir, batch):
    """What the host launches for an update (the trainer's factor, the norm, the step, the zeroing)
    does not grow with the parameter tensors: one batch of work a shape, not one a parameter."""
    kernels = {}
    for layers in (1, 3):
        model, criterion, optimizer = bf16_model_and_optimizer(copy_task_dir, "adafactor_batched", "--encoder-layers",
                                                               str(layers), "--decoder-layers", str(layers))
        loss, sample_size, _ = criterion(model, batch)
        optimizer.backward(loss)
        with Launched() as counted:
            optimizer.multiply_grads(1 / sample_size)
            optimizer.clip_grad_norm(0.1)
            optimizer.step()
            optimizer.zero_grad()
        kernels[layers] = counted.kernels
    assert kernels[1] == kernels[3] <= 400


@pytest.mark.slow
def test_fairseq_train_with_adafactor_batched_logs_fairseqs_losses_and_resumes(copy_task_dir, tmp_path):
    """``fairseq-train --optimizer adafactor_batched`` end to end, fairseq's Adafactor options
    given on the command line: the same logged losses as ``--optimizer adafactor``, and a second
    run resumes from the saved state."""
    options = ["--adafactor-eps", "(1e-30, 1e-3)", "--clip-threshold", "1.0", "--decay-rate", "-0.8"]
    runs = {}
    for name in ("adafactor", "adafactor_batched"):
        flags = [copy_task_dir, *TRAIN_FLAGS, "--save-dir", str(tmp_path / name), *options]
        flags[flags.index("adam")] = name
        runs[name] = (flags, run_cli(["fairseq-train", *flags, "--max-update", "8"]))
    losses = {name: re.findall(r"\| train \| .*?\| loss ([0-9.]+) \|", log) for name, (_, log) in runs.items()}
    assert losses["adafactor"] and losses["adafactor_batched"] == losses["adafactor"]
    flags = runs["adafactor_batched"][0]
    resumed = run_cli(["fairseq-train", *flags, "--max-update", "10"])
    assert re.search(r"Loaded checkpoint .*@ 8 updates", resumed) and re.search(r"num_updates 10\b", resumed)
