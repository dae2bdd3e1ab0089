"""``--optimizer adamw_torch``: one update equals fairseq's ``adam`` with the same decoupled
weight decay, in fp32 and under fairseq's fp16 and bf16 wrappers (whose fp32 master weights
it keeps flat), with the fused kernel where the device has it and ``foreach`` elsewhere; under
the memory-efficient bf16 wrapper it keeps the fp32 master weights itself, holds no fp32
gradient for every weight, and updates as under the mixed-precision wrapper, the wrapper's
factor (the trainer's, the clipping's, fp16's loss scale) divided out of the gradients' fp32
copies; its gradient norm is fairseq's, and an update launches as many kernels at any depth."""

import re
from types import SimpleNamespace

import pytest
import torch
from fairseq import optim, utils
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.optim.fp16_optimizer import FP16Optimizer, MemoryEfficientFP16Optimizer

from benchmarks.common import Launched
from benchmarks.scale.training import trainer_update
from builders.cli import TRAIN_FLAGS, run_cli
from builders.models import build_tiny
from pagesum_plugin.checkpoints.safety import load_checkpoint_file
from pagesum_plugin.optim.adamw_torch import MasterWeightAdamW, build_adamw

SETTINGS = ("--lr", "1e-3", "--weight-decay", "0.01", "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-8")


@pytest.fixture
def batch(copy_task_batch):
    return copy_task_batch


def model_and_config(data_dir, optimizer, *flags):
    """A tiny PageSum model (the same weights every call) and fairseq's configuration for it."""
    args, task, model = build_tiny(data_dir, "--optimizer", optimizer, *SETTINGS, *flags)
    return model, task.build_criterion(args), convert_namespace_to_omegaconf(args)


def backward(model, criterion, batch, optimizer):
    """Through the optimizer, as fairseq's trainer does: its wrappers scale the loss and copy
    the gradients to the master weights only then."""
    model.train()
    torch.manual_seed(0)  # the same dropout masks for every model
    loss, sample_size, _ = criterion(model, batch)
    optimizer.backward(loss / sample_size)


def updated_weights(model) -> dict:
    return {name: p.detach().float().clone() for name, p in model.named_parameters()}


def one_update(data_dir, batch, optimizer_name, *flags, dtype=torch.float32, wrapped=False):
    """The model's weights after one update of ``optimizer_name``, and the optimizer."""
    model, criterion, cfg = model_and_config(data_dir, optimizer_name, *flags)
    model, criterion = model.to(dtype), criterion.to(dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = (FP16Optimizer.build_optimizer(cfg, params) if wrapped else optim.build_optimizer(cfg.optimizer, params))
    optimizer.zero_grad()
    backward(model, criterion, batch, optimizer)
    optimizer.step()
    return updated_weights(model), optimizer


def assert_same_weights(actual, expected, atol):
    assert actual.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], atol=atol, rtol=0, msg=name)


def assert_moved_as_adam_moves(masters, reference, data_dir, dtype):
    """The fp32 master weights (flat) equal ``reference`` to 1e-6 and moved away from the
    model's starting weights by about the learning rate (so the gradients reached them)."""
    torch.testing.assert_close(masters, reference, atol=1e-6, rtol=0)
    model = model_and_config(data_dir, "adam")[0].to(dtype)
    start = torch.cat([p.detach().float().reshape(-1) for p in model.parameters()])  # (n_params,)
    assert (masters.detach() - start).abs().max() > 5e-4


def test_one_update_equals_fairseqs_adam_with_decoupled_weight_decay_in_fp32(copy_task_dir, batch):
    before = updated_weights(model_and_config(copy_task_dir, "adam")[0])
    adam, _ = one_update(copy_task_dir, batch, "adam")
    adamw, optimizer = one_update(copy_task_dir, batch, "adamw_torch")
    assert isinstance(optimizer.optimizer, torch.optim.AdamW)
    assert any((adamw[n] - before[n]).abs().max() > 1e-4 for n in before)  # the update moved the weights
    assert_same_weights(adamw, adam, atol=1e-6)


def three_updates(data_dir, optimizer_name, *flags) -> dict:
    """The weights after three updates on the same gradients every update, from 1e-10 to 1:
    where epsilon matters and where it does not."""
    model, _, cfg = model_and_config(data_dir, optimizer_name, *flags)
    params = list(model.parameters())
    optimizer = optim.build_optimizer(cfg.optimizer, params)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        for p in params:
            p.grad = torch.randn(p.shape, generator=generator) * 10.0 ** -torch.randint(0, 11, p.shape,
                                                                                        generator=generator)
        optimizer.step()
    return updated_weights(model)


@pytest.mark.parametrize("eps", ["1e-8", "1e-4"])
def test_three_updates_on_the_same_gradients_equal_fairseqs_adam_as_its_epsilon_moves(copy_task_dir, eps):
    """Any difference is the optimizers' own; ``--adam-eps`` (the last flag given wins) reaches both."""
    adamw = three_updates(copy_task_dir, "adamw_torch", "--adam-eps", eps)
    assert_same_weights(adamw, three_updates(copy_task_dir, "adam", "--adam-eps", eps), atol=1e-6)
    if eps != "1e-8":
        default = three_updates(copy_task_dir, "adamw_torch")
        assert any((adamw[n] - default[n]).abs().max() > 1e-4 for n in default), "--adam-eps changed no update"


def test_a_resumed_optimizer_continues_the_epsilon_schedule_where_it_stopped(copy_task_dir):
    """Two updates, a save and a load into a fresh optimizer, one more update: the same weights
    as three updates in one go."""
    def run(updates, state=None):
        model, _, cfg = model_and_config(copy_task_dir, "adamw_torch")
        if state is not None:
            model.load_state_dict(state["model"])
        params = list(model.parameters())
        optimizer = optim.build_optimizer(cfg.optimizer, params)
        if state is not None:
            optimizer.load_state_dict(state["optimizer"])
        for scale in updates:
            for p in params:
                p.grad = torch.full_like(p, scale)
            optimizer.step()
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

    tiny = [1e-9, 1e-8, 1e-9]  # gradients the size of epsilon, where its schedule shows
    straight = run(tiny)
    resumed = run(tiny[2:], state=run(tiny[:2]))
    assert_same_weights(resumed["model"], straight["model"], atol=1e-7)


def test_weight_decay_is_decoupled_as_in_fairseqs_adam(copy_task_dir, batch):
    """Without the decay the weights land elsewhere: the test above sees the decay."""
    decayed, _ = one_update(copy_task_dir, batch, "adamw_torch")
    plain, _ = one_update(copy_task_dir, batch, "adamw_torch", "--weight-decay", "0")
    assert max((decayed[n] - plain[n]).abs().max() for n in plain) > 1e-6


def test_fused_kernel_where_the_device_has_one_and_foreach_elsewhere():
    on_cpu = build_adamw([torch.zeros(3, requires_grad=True)], lr=1e-3)
    assert on_cpu.defaults["fused"] and not on_cpu.defaults["foreach"]
    on_meta = build_adamw([torch.zeros(3, device="meta", requires_grad=True)], lr=1e-3)  # no fused kernel
    assert on_meta.defaults["foreach"] and not on_meta.defaults["fused"]


def test_fp16_wrapper_keeps_flat_master_weights_and_updates_them_as_adam(copy_task_dir, batch, monkeypatch):
    # fairseq keys its flat master weights by torch.cuda.current_device() and matches them to the
    # model's parameters by device index, which is None on the CPU
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    _, adam = one_update(copy_task_dir, batch, "adam", "--fp16", dtype=torch.float16, wrapped=True)
    _, adamw = one_update(copy_task_dir, batch, "adamw_torch", "--fp16", dtype=torch.float16, wrapped=True)
    assert adamw.has_flat_params and adam.has_flat_params
    assert_moved_as_adam_moves(adamw.fp32_params[None], adam.fp32_params[None], copy_task_dir, torch.float16)
    assert len(adamw.optimizer.param_groups[0]["params"]) == 1


def test_bf16_wrapper_flattens_the_master_weights_and_updates_them_as_adam(copy_task_dir, batch):
    adam_weights, adam = one_update(copy_task_dir, batch, "adam", "--bf16", dtype=torch.bfloat16, wrapped=True)
    adamw_weights, adamw = one_update(copy_task_dir, batch, "adamw_torch", "--bf16", dtype=torch.bfloat16,
                                      wrapped=True)
    (flat,) = adamw.optimizer.param_groups[0]["params"]  # one flat fp32 tensor
    assert flat.dtype == torch.float32 and flat.numel() == sum(p.numel() for p in adamw.fp32_params)
    assert all(p.untyped_storage().data_ptr() == flat.untyped_storage().data_ptr() for p in adamw.fp32_params)
    assert_moved_as_adam_moves(flat, torch.cat([p.reshape(-1) for p in adam.fp32_params]), copy_task_dir,
                               torch.bfloat16)
    assert_same_weights(adamw_weights, {n: w.bfloat16().float() for n, w in adamw_weights.items()}, atol=0)


def test_the_moments_are_made_with_the_optimizer_before_any_activation(copy_task_dir):
    """As torch makes them at the first update (zeros, step 0), but before training allocates its
    activations; the updates above equal fairseq's adam with them."""
    model, _, cfg = model_and_config(copy_task_dir, "adamw_torch", "--bf16")
    optimizer = FP16Optimizer.build_optimizer(cfg, [p for p in model.to(torch.bfloat16).parameters()]).optimizer
    (flat,) = optimizer.param_groups[0]["params"]
    state = optimizer.state[flat]
    assert state["exp_avg"].shape == state["exp_avg_sq"].shape == flat.shape
    assert not (state["exp_avg"].any() or state["exp_avg_sq"].any() or state["step"])


def test_bf16_master_weight_that_once_had_no_gradient_is_updated_as_adam(copy_task_dir, batch):
    """fairseq's wrapper replaces a master's gradient with a fresh tensor when the model parameter
    got none, and copies later gradients into that tensor: the update must still read them."""
    results = {}
    for name in ("adam", "adamw_torch"):
        model, criterion, cfg = model_and_config(copy_task_dir, name, "--bf16")
        model, criterion = model.to(torch.bfloat16), criterion.to(torch.bfloat16)
        names, params = zip(*[(n, p) for n, p in model.named_parameters() if p.requires_grad])
        skipped = names.index("decoder.layers.0.fc1.weight")
        optimizer = FP16Optimizer.build_optimizer(cfg, list(params))
        for update in range(2):
            optimizer.zero_grad()
            backward(model, criterion, batch, optimizer)
            if update == 0:
                params[skipped].grad = None  # as if it took no part in the first step
            optimizer.step()
        results[name] = optimizer.fp32_params[skipped].detach().clone()
    torch.testing.assert_close(results["adamw_torch"], results["adam"], atol=1e-6, rtol=0)


@pytest.mark.slow
def test_fairseq_train_with_adamw_torch_learns_saves_and_resumes(copy_task_dir, tmp_path):
    """``fairseq-train --optimizer adamw_torch`` end to end on CPU (fairseq's trainer takes
    ``--bf16`` on a CPU for a TPU, and its flat ``--fp16`` masters need CUDA: the wrappers are
    tested above): it trains as ``adam`` does (the same logged losses), and a second run resumes
    from the saved optimizer state."""
    reference = [copy_task_dir, *TRAIN_FLAGS, "--save-dir", str(tmp_path / "adam"), "--max-update", "12"]
    flags = [copy_task_dir, *TRAIN_FLAGS, "--save-dir", str(tmp_path)]
    flags[flags.index("adam")] = "adamw_torch"
    first = run_cli(["fairseq-train", *flags, "--max-update", "12"])
    losses = re.findall(r"\| train \| .*?\| loss ([0-9.]+) \|", first)
    assert losses and losses == re.findall(r"\| train \| .*?\| loss ([0-9.]+) \|", run_cli(["fairseq-train", *reference]))
    state = load_checkpoint_file(str(tmp_path / "checkpoint_last.pt"))["last_optimizer_state"]
    assert all(float(s["step"]) == 12 for s in state["state"].values())  # AdamW's own state, saved
    resumed = run_cli(["fairseq-train", *flags, "--max-update", "16"])
    assert re.search(r"Loaded checkpoint .*@ 12 updates", resumed) and re.search(r"num_updates 16\b", resumed)


def bf16_updates(data_dir, batch, flag, updates=3, bucket_bytes=None):
    """(the bf16 model, its optimizer) after ``updates`` updates of ``adamw_torch`` under the
    wrapper that ``flag`` asks for: ``--bf16`` (fp32 master weights and gradients in fairseq's
    wrapper) or ``--memory-efficient-bf16`` (the optimizer given the bf16 weights)."""
    model, criterion, cfg = model_and_config(data_dir, "adamw_torch", flag)
    model, criterion = model.to(torch.bfloat16), criterion.to(torch.bfloat16)
    params = [p for p in model.parameters() if p.requires_grad]
    wrapper = MemoryEfficientFP16Optimizer if flag == "--memory-efficient-bf16" else FP16Optimizer
    optimizer = wrapper.build_optimizer(cfg, params)
    if bucket_bytes is not None:
        optimizer.optimizer.bucket_bytes = bucket_bytes
    for _ in range(updates):
        optimizer.zero_grad()
        backward(model, criterion, batch, optimizer)
        optimizer.step()
    return model, optimizer


def test_memory_efficient_bf16_keeps_fp32_master_weights_and_updates_as_the_mixed_precision_wrapper(
        copy_task_dir, batch):
    """Three updates: the same bf16 weights, bit for bit, and the same fp32 master weights as
    fairseq's mixed-precision wrapper gives, which holds an fp32 gradient for every weight."""
    mixed_model, mixed = bf16_updates(copy_task_dir, batch, "--bf16")
    lean_model, lean = bf16_updates(copy_task_dir, batch, "--memory-efficient-bf16")
    assert isinstance(lean.optimizer, MasterWeightAdamW) and not hasattr(lean, "fp32_params")
    assert_same_weights(updated_weights(lean_model), updated_weights(mixed_model), atol=0)
    masters = torch.cat([lean.optimizer.state[p]["master"].reshape(-1) for p in lean_model.parameters()])
    assert masters.dtype == torch.float32
    assert_moved_as_adam_moves(masters, mixed.optimizer.param_groups[0]["params"][0], copy_task_dir,
                               torch.bfloat16)


def test_memory_efficient_bf16_holds_twelve_bytes_a_weight_and_no_fp32_gradient(copy_task_dir, batch):
    """Beside the bf16 weights and their bf16 gradients: an fp32 master and two fp32 moments a
    weight (and a step count a tensor); the mixed-precision wrapper also holds an fp32 gradient
    for every weight."""
    model, optimizer = bf16_updates(copy_task_dir, batch, "--memory-efficient-bf16", updates=1)
    weights = sum(p.numel() for p in model.parameters())
    state = [t for s in optimizer.optimizer.state.values() for t in s.values()]
    assert sum(t.numel() * t.element_size() for t in state if t.dim()) == 12 * weights
    assert all(p.grad is None or p.grad.dtype == torch.bfloat16 for p in model.parameters())
    _, mixed = bf16_updates(copy_task_dir, batch, "--bf16", updates=1)
    assert sum(p.grad.numel() * p.grad.element_size() for p in mixed.fp32_params) == 4 * weights


def test_memory_efficient_bf16_makes_its_state_with_the_optimizer_in_three_flat_buffers(copy_task_dir):
    """Before training allocates any activation, not at the first update out of the memory they
    freed: the masters (the weights in fp32) and the two moments (zeros) of every weight are views
    of one buffer each."""
    model, _, cfg = model_and_config(copy_task_dir, "adamw_torch", "--memory-efficient-bf16")
    params = [p for p in model.to(torch.bfloat16).parameters() if p.requires_grad]
    optimizer = MemoryEfficientFP16Optimizer.build_optimizer(cfg, params).optimizer
    states = [optimizer.state[p] for p in params]
    for name in ("master", "exp_avg", "exp_avg_sq"):
        assert len({state[name].untyped_storage().data_ptr() for state in states}) == 1, name
        assert sum(state[name].numel() for state in states) == sum(p.numel() for p in params)
    assert all(torch.equal(state["master"], p.float()) for state, p in zip(states, params))
    assert not any(state["exp_avg"].any() or state["exp_avg_sq"].any() or state["step"] for state in states)


def test_memory_efficient_bf16_updates_in_buckets_as_in_one(copy_task_dir, batch):
    """Gradients converted a few tensors at a time give the update of all at once."""
    whole, _ = bf16_updates(copy_task_dir, batch, "--memory-efficient-bf16", updates=2)
    bucketed, _ = bf16_updates(copy_task_dir, batch, "--memory-efficient-bf16", updates=2, bucket_bytes=4096)
    assert_same_weights(updated_weights(bucketed), updated_weights(whole), atol=0)


def test_memory_efficient_bf16_resumes_from_its_fp32_masters(copy_task_dir, batch):
    """Saved and loaded through fairseq's wrapper, the masters and moments stay fp32 (torch's
    loading would round them to the bf16 weights' dtype), and one more update lands where three
    in one go land."""
    straight_model, _ = bf16_updates(copy_task_dir, batch, "--memory-efficient-bf16", updates=3)
    saved_model, saved = bf16_updates(copy_task_dir, batch, "--memory-efficient-bf16", updates=2)
    model, criterion, cfg = model_and_config(copy_task_dir, "adamw_torch", "--memory-efficient-bf16")
    model, criterion = model.to(torch.bfloat16), criterion.to(torch.bfloat16)
    model.load_state_dict(saved_model.state_dict())
    optimizer = MemoryEfficientFP16Optimizer.build_optimizer(cfg, [p for p in model.parameters() if p.requires_grad])
    optimizer.load_state_dict(saved.state_dict())
    assert all(t.dtype == torch.float32 for s in optimizer.optimizer.state.values() for t in s.values())
    direct = MasterWeightAdamW([p for p in model.parameters() if p.requires_grad])  # torch's own loading
    direct.load_state_dict(saved.optimizer.state_dict())
    assert all(t.dtype == torch.float32 for s in direct.state.values() for t in s.values())
    optimizer.zero_grad()
    backward(model, criterion, batch, optimizer)
    optimizer.step()
    assert_same_weights(updated_weights(model), updated_weights(straight_model), atol=0)


WRAPPERS = {  # flag: (fairseq's wrapper, the model's dtype)
    "--bf16": (FP16Optimizer, torch.bfloat16),
    "--memory-efficient-bf16": (MemoryEfficientFP16Optimizer, torch.bfloat16),
    "--fp16": (FP16Optimizer, torch.float16),
    "--memory-efficient-fp16": (MemoryEfficientFP16Optimizer, torch.float16),
}


def updated_as_the_trainer(data_dir, batch, flag, clip_norm=0.1):
    """(the 16-bit model, its optimizer) after one update of ``adamw_torch`` under the wrapper of
    ``flag``, as fairseq's trainer makes it: the summed loss's gradients multiplied by 1 / sample
    size, their norm clipped to ``clip_norm``, a step."""
    wrapper, dtype = WRAPPERS[flag]
    model, criterion, cfg = model_and_config(data_dir, "adamw_torch", flag)
    model, criterion = model.to(dtype), criterion.to(dtype)
    optimizer = wrapper.build_optimizer(cfg, [p for p in model.parameters() if p.requires_grad])
    model.train()
    loss, sample_size, _ = criterion(model, batch)
    trainer_update(optimizer, loss, sample_size, clip_norm)
    return model, optimizer


def test_memory_efficient_bf16_under_the_trainers_calls_updates_as_the_mixed_precision_wrapper(copy_task_dir, batch):
    """An update as the trainer makes it (the summed loss's gradients times 1 / sample size, then
    clipped): the same fp32 masters, to fp32 rounding (the wrapper multiplies the fp32 gradients
    by its factor; the step divides them by its inverse)."""
    _, mixed = updated_as_the_trainer(copy_task_dir, batch, "--bf16")
    lean_model, lean = updated_as_the_trainer(copy_task_dir, batch, "--memory-efficient-bf16")
    masters = torch.cat([lean.optimizer.state[p]["master"].reshape(-1) for p in lean_model.parameters()])
    torch.testing.assert_close(masters, mixed.optimizer.param_groups[0]["params"][0].detach(), atol=2e-7, rtol=0)


def test_memory_efficient_fp16_unscales_the_fp32_gradients_as_the_mixed_precision_wrapper(copy_task_dir, batch,
                                                                                          monkeypatch):
    """Under fp16 the gradients carry the loss scale (128 at first): the memory-efficient update
    divides it out of their fp32 copies, as ``--fp16``'s wrapper does out of its fp32 gradients,
    and lands on its masters to fp32 rounding (unscaled in place in fp16, the gradients would
    first lose what falls below fp16's range)."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)  # fairseq's flat fp16 masters on the CPU
    _, mixed = updated_as_the_trainer(copy_task_dir, batch, "--fp16")
    lean_model, lean = updated_as_the_trainer(copy_task_dir, batch, "--memory-efficient-fp16")
    masters = torch.cat([lean.optimizer.state[p]["master"].reshape(-1) for p in lean_model.parameters()])
    torch.testing.assert_close(masters, mixed.fp32_params[None].detach(), atol=2e-7, rtol=0)


def test_memory_efficient_bf16_divides_the_fp32_gradients_not_the_bf16_ones(copy_task_dir, batch):
    """The wrapper's factor (here 1/3) reaches the step, which applies it to the gradients' fp32
    copies: Adam's first moment is (1 - beta1) * g / 3 in fp32, and the bf16 gradients are left
    as backward made them (scaled in place, they would first be rounded to bf16)."""
    model, criterion, cfg = model_and_config(copy_task_dir, "adamw_torch", "--memory-efficient-bf16")
    model, criterion = model.to(torch.bfloat16), criterion.to(torch.bfloat16)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = MemoryEfficientFP16Optimizer.build_optimizer(cfg, params)
    backward(model, criterion, batch, optimizer)
    grads = [p.grad.clone() for p in params]
    optimizer.multiply_grads(1 / 3)
    optimizer.step()
    beta1 = optimizer.optimizer.param_groups[0]["betas"][0]
    for p, grad in zip(params, grads):
        assert torch.equal(p.grad, grad)
        torch.testing.assert_close(optimizer.optimizer.state[p]["exp_avg"], (1 - beta1) * (grad.float() / 3),
                                   atol=0, rtol=2e-7)


def test_the_gradient_norm_and_its_clipping_are_fairseqs(copy_task_dir, batch):
    """``clip_grad_norm`` over many bf16 gradients: fairseq's total norm (the 2-norm of each
    gradient's fp32 norm), and the gradients scaled down to the maximum norm as fairseq scales them."""
    model, criterion, cfg = model_and_config(copy_task_dir, "adamw_torch", "--memory-efficient-bf16")
    model, criterion = model.to(torch.bfloat16), criterion.to(torch.bfloat16)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = optim.build_optimizer(cfg.optimizer, params)
    backward(model, criterion, batch, optimizer)
    expected_grads = [p.grad.clone() for p in params]
    expected = utils.clip_grad_norm_([SimpleNamespace(grad=g) for g in expected_grads], 0.01)
    norm = optimizer.clip_grad_norm(0.01)
    assert norm.dtype == torch.float32 and torch.equal(norm, expected) and norm > 0.01
    assert all(torch.equal(p.grad, g) for p, g in zip(params, expected_grads))


def test_a_memory_efficient_update_launches_as_many_kernels_at_any_depth(copy_task_dir, batch):
    """What the host launches for an update (the trainer's factor, the norm, the step, the zeroing)
    does not grow with the parameter tensors: multi-tensor kernels, one conversion a bucket."""
    kernels = {}
    for layers in (1, 3):
        model, criterion, cfg = model_and_config(copy_task_dir, "adamw_torch", "--memory-efficient-bf16",
                                                 "--encoder-layers", str(layers), "--decoder-layers", str(layers))
        model, criterion = model.to(torch.bfloat16), criterion.to(torch.bfloat16)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = MemoryEfficientFP16Optimizer.build_optimizer(cfg, params)
        backward(model, criterion, batch, optimizer)
        with Launched() as counted:
            optimizer.multiply_grads(0.5)
            optimizer.clip_grad_norm(0.1)
            optimizer.step()
            optimizer.zero_grad()
        kernels[layers] = counted.kernels
    assert kernels[1] == kernels[3] <= 24  # the norm and clipping 9, a bucket's step 8, torch's profiler markers
