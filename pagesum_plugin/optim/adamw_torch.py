"""``--optimizer adamw_torch``: ``torch.optim.AdamW`` with its fused kernel, for fairseq.

fairseq's ``adam`` runs apex's ``FusedAdam`` when apex is installed and otherwise its own
Adam, a Python loop over the parameters (several kernel launches per parameter tensor).
torch's AdamW has a fused kernel (one launch for the whole update) on CUDA and CPU and a
multi-tensor ``foreach`` path everywhere: ``fused=True`` where the parameters' device has
the fused kernel, ``foreach=True`` otherwise.

Under fairseq's mixed-precision wrapper (``FP16Optimizer``) the optimizer updates fp32
master weights. With ``--fp16`` fairseq flattens them into one tensor itself; with
``--bf16`` it keeps one fp32 copy per parameter, and this optimizer flattens those copies:
each copy's data and gradient become views of two flat buffers, so the wrapper's copies in
and out are unchanged and the update runs over one flat tensor. The saved state is then
the same (one flat parameter) under ``--fp16`` and ``--bf16``.

Under fairseq's memory-efficient wrapper (``--memory-efficient-bf16`` / ``--memory-efficient-fp16``)
the optimizer is given the 16-bit parameters themselves, and ``MasterWeightAdamW`` keeps their
fp32 master weights in its own state, beside the moments. It reads the 16-bit gradients a
bucket at a time (``MASTER_BUCKET_BYTES`` of fp32 gradients at once, converted in one copy and
one cast), updates the masters and writes them back rounded. That is the same update as under
the mixed-precision wrapper, whose fp32 gradients for every weight (4 bytes a parameter, 1.6 GB
at ``bart.large``'s size with PageSum's confidence layer) it never holds: 12 bytes a parameter
of state, plus the 16-bit weights and gradients.

The update is fairseq's ``adam`` (decoupled weight decay, as its docstring says), epsilon
included: fairseq divides by ``sqrt(v) + eps`` and scales by ``sqrt(1 - beta2^t)``, torch by
``sqrt(v / (1 - beta2^t)) + eps``; so at update t torch is given ``eps / sqrt(1 - beta2^t)``,
which makes the two the same function of the gradients (``--adam-eps`` keeps fairseq's
meaning). t is the group's update count, which the group keeps (and checkpoints save).

What the host launches for an update does not grow with the parameters where the project owns
the loop: the update is torch's multi-tensor kernel, the gradient norm that fairseq's trainer
asks for at every update (``clip_grad_norm``, even with ``--clip-norm 0``) is one multi-tensor
norm a device instead of one norm a parameter (fairseq's way without apex), and the
memory-efficient update converts a bucket's gradients in one copy instead of one a parameter.
fairseq's ``--bf16`` wrapper still copies every gradient in, every weight out and zeroes every
fp32 gradient one parameter at a time (docs/training.md, ``benchmarks.update_operators``).
"""

import ast
import logging
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Union

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II, OmegaConf
from torch.optim.adamw import adamw
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

from ..architectures import MASTER_BUCKET_BYTES

logger = logging.getLogger(__name__)


@dataclass
class AdamWTorchConfig(FairseqDataclass):
    adam_betas: Any = field(default=(0.9, 0.999), metadata={"help": "betas for Adam optimizer"})
    adam_eps: float = field(default=1e-8, metadata={"help": "epsilon for Adam optimizer"})
    weight_decay: float = field(default=0.0, metadata={"help": "decoupled weight decay, as fairseq's adam"})
    lr: List[float] = II("optimization.lr")
    bf16: bool = II("common.bf16")
    memory_efficient_bf16: bool = II("common.memory_efficient_bf16")


def flatten_master_weights(params: List[torch.Tensor]) -> torch.nn.Parameter:
    """One flat fp32 parameter whose data and gradient hold every tensor of ``params``; each
    tensor's ``data`` and ``grad`` become views into them, so writes through either side are
    shared (``regather_grads`` restores a gradient that was replaced rather than written).

    On CUDA the per-parameter copies that the views replace leave their memory in the caching
    allocator, in as many blocks as there were parameters, which the training step would then
    split among its activations; it is handed back to the device at once."""
    flat = torch.nn.Parameter(torch.cat([p.data.reshape(-1) for p in params]))  # (total,)
    flat.grad = torch.zeros_like(flat.data)
    offset = 0
    for p in params:
        numel = p.numel()
        grad = flat.grad[offset:offset + numel].view_as(p)
        if p.grad is not None:
            grad.copy_(p.grad)
        p.data, p.grad = flat.data[offset:offset + numel].view_as(p), grad
        offset += numel
    if flat.is_cuda:
        torch.cuda.empty_cache()
    return flat


def regather_grads(params: List[torch.Tensor], flat: torch.nn.Parameter) -> None:
    """Puts back the views that ``flatten_master_weights`` made: fairseq's wrapper gives a
    parameter that received no gradient a fresh zero tensor instead of writing into its view."""
    offset = 0
    for p in params:
        numel = p.numel()
        view = flat.grad[offset:offset + numel].view_as(p)
        if p.grad is None or p.grad.data_ptr() != view.data_ptr():
            view.copy_(p.grad if p.grad is not None else torch.zeros_like(view))
            p.grad = view
        offset += numel


UPDATES = "fairseq_adam_updates"  # a param group's update count, kept (and saved) in the group itself
FLAT_STATE = ("master", "exp_avg", "exp_avg_sq")  # MasterWeightAdamW's fp32 state: views of a flat buffer each


def updates_done(optimizer: torch.optim.Optimizer, group: dict) -> int:
    """How many updates the group has had: its own count, or, in a state saved without one,
    torch's per-parameter count (read once: on CUDA each read waits for the device)."""
    if UPDATES not in group:
        steps = [optimizer.state[p]["step"] for p in group["params"] if "step" in optimizer.state.get(p, {})]
        group[UPDATES] = int(max(float(step) for step in steps)) if steps else 0
    return group[UPDATES]


def has_fused_kernel(params: List[torch.Tensor]) -> bool:
    """Whether torch's fused AdamW kernel runs on every parameter's device; torch checks the
    devices only at the first step, against the list it keeps in
    ``_get_fused_kernels_supported_devices``, and the same list decides here."""
    devices = _get_fused_kernels_supported_devices()
    return all(p.device.type in devices and torch.is_floating_point(p) for p in params)


def build_adamw(params, **config) -> torch.optim.Optimizer:
    """AdamW with the fused kernel when every parameter's device has one, else ``foreach``; for
    16-bit parameters (fairseq's memory-efficient wrapper), one that keeps their fp32 master
    weights itself."""
    params = list(params)
    fused = has_fused_kernel(params)
    if fused:
        logger.info("adamw_torch: fused kernel")
    else:
        logger.info(f"adamw_torch: multi-tensor (foreach) kernel: no fused one on "
                    f"{sorted({p.device.type for p in params})}")
    if any(p.dtype in (torch.bfloat16, torch.float16) for p in params):
        logger.info("adamw_torch: fp32 master weights kept in the optimizer's state")
        return MasterWeightAdamW(params, fused=fused, **config)
    kernel = {"fused": True} if fused else {"foreach": True}
    return torch.optim.AdamW(params, **kernel, **config)


def make_state(optimizer: torch.optim.AdamW) -> None:
    """Makes every parameter's state now, as torch would make it at the first update (step 0,
    zero moments), for parameters that all get a gradient at every update: a parameter that
    gets none never has state in torch's AdamW."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            # torch keeps the step count on the parameter's device for the fused kernel, else on the host
            step = torch.zeros((), dtype=torch.float32, device=p.device if group["fused"] else "cpu")
            optimizer.state[p] = {"step": step, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}


def gradient_norm(grads: List[torch.Tensor]) -> torch.Tensor:
    """fairseq's total gradient norm (``utils.clip_grad_norm_``): the 2-norm of every gradient's
    fp32 2-norm, on the first gradient's device; each device's norms in one multi-tensor call."""
    by_device: Dict[torch.device, List[torch.Tensor]] = {}
    for grad in grads:
        by_device.setdefault(grad.device, []).append(grad)
    norms = [norm.to(grads[0].device) for device_grads in by_device.values()
             for norm in torch._foreach_norm(device_grads, 2, dtype=torch.float32)]
    return torch.linalg.vector_norm(torch.stack(norms))  # (,)


def fp32_gradients(params: List[torch.Tensor], scale: Union[float, torch.Tensor] = 1.0) -> List[torch.Tensor]:
    """The 16-bit gradients of ``params`` in fp32 and divided by ``scale``, shaped as their
    parameters: views of one flat buffer, made by one concatenation, one cast and one division (a
    ``.float()`` a gradient would launch a kernel each). Held at once: the fp32 buffer and, while
    it is cast, its 16-bit copy."""
    flat = torch.cat([p.grad.reshape(-1) for p in params]).float()  # (total,)
    if torch.is_tensor(scale) or scale != 1.0:  # a tensor is never compared: that would wait for the device
        flat.div_(scale)
    return [grad.view_as(p) for grad, p in zip(flat.split([p.numel() for p in params]), params)]


def buckets(params: List[torch.Tensor], bucket_bytes: int) -> Iterator[List[torch.Tensor]]:
    """``params`` in consecutive lists whose fp32 copies hold about ``bucket_bytes`` (a larger
    parameter is a bucket of its own)."""
    bucket, held = [], 0
    for p in params:
        if bucket and held + 4 * p.numel() > bucket_bytes:
            yield bucket
            bucket, held = [], 0
        bucket.append(p)
        held += 4 * p.numel()
    if bucket:
        yield bucket


def load_into_own_state(optimizer: torch.optim.Optimizer, state_dict: Dict[str, Any]) -> None:
    """torch's ``load_state_dict``, each parameter's state kept as the optimizer made it. torch's
    loading casts floating-point state to its parameter's dtype, which would round fp32 state to
    16 bits, and replaces the views of flat or stacked buffers: the saved values are copied into
    the views instead (a number, such as an update count, replaces its own; a name the optimizer
    does not keep is left out)."""
    own = {p: optimizer.state[p] for group in optimizer.param_groups for p in group["params"]}
    torch.optim.Optimizer.load_state_dict(optimizer, state_dict)
    saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
    for saved_id, p in zip(saved_ids, own):
        for name, value in state_dict["state"].get(saved_id, {}).items():
            if name not in own[p]:
                continue
            if torch.is_tensor(own[p][name]):
                own[p][name].copy_(value)
            else:
                own[p][name] = type(own[p][name])(value)
        optimizer.state[p] = own[p]


class MasterWeightAdamW(torch.optim.Optimizer):
    """torch's AdamW for 16-bit parameters, with their fp32 master weights in its state.

    Each parameter's state: ``master`` (its fp32 weights), ``exp_avg`` and ``exp_avg_sq`` (fp32),
    ``step``. They are made with the optimizer, before training allocates its activations: the
    masters and the moments of a group's parameters on one device are views of three flat
    buffers (``FLAT_STATE``), three allocations in all, where state made at the first update
    would take one block per parameter and tensor out of the memory that the activations had
    just freed. An update converts the 16-bit gradients to fp32 a bucket at a time
    (``bucket_bytes``, ``fp32_gradients``), runs torch's AdamW (fused or foreach) on the bucket's
    masters, and writes them back into the parameters, rounded."""

    supports_step_with_scale = True  # fairseq's wrappers then pass the gradients' factor to ``step``

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 fused: bool = False, bucket_bytes: int = MASTER_BUCKET_BYTES):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused))
        self.bucket_bytes = bucket_bytes

    @torch.no_grad()
    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """The group, and every one of its parameters' state at update 0: its master is its
        weights, its moments zeros."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        by_device: Dict[torch.device, List[torch.Tensor]] = {}
        for p in group["params"]:
            by_device.setdefault(p.device, []).append(p)
        for device, params in by_device.items():
            total = sum(p.numel() for p in params)
            flat = {name: torch.zeros(total, dtype=torch.float32, device=device) for name in FLAT_STATE}
            offset = 0
            for p in params:
                state = {name: buffer[offset:offset + p.numel()].view_as(p) for name, buffer in flat.items()}
                state["master"].copy_(p)
                # the fused kernel reads the step count on the parameter's device
                state["step"] = torch.zeros((), dtype=torch.float32, device=device if group["fused"] else "cpu")
                self.state[p] = state
                offset += p.numel()

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """torch's loading, the fp32 masters and moments kept in their flat buffers
        (``load_into_own_state``)."""
        load_into_own_state(self, state_dict)

    @torch.no_grad()
    def step(self, closure=None, scale: Union[float, torch.Tensor] = 1.0):
        """One update from the 16-bit gradients divided by ``scale``: fairseq's memory-efficient
        wrapper passes the factor it would otherwise multiply them by in place, in 16 bits (the
        loss scale, the trainer's 1 / sample size, the clipping: ``supports_step_with_scale``), and
        it divides their fp32 copies instead."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for bucket in buckets([p for p in group["params"] if p.grad is not None], self.bucket_bytes):
                states = [self.state[p] for p in bucket]
                masters = [state["master"] for state in states]
                adamw(
                    masters, fp32_gradients(bucket, scale), [state["exp_avg"] for state in states],
                    [state["exp_avg_sq"] for state in states], [], [state["step"] for state in states],
                    foreach=not group["fused"], fused=group["fused"], amsgrad=False, beta1=beta1, beta2=beta2,
                    lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"], maximize=False)
                torch._foreach_copy_(bucket, masters)  # the weights the model computes with, rounded
        return loss


class NormOfAllGradients(FairseqOptimizer):
    """A fairseq optimizer whose gradient norm, which fairseq's trainer asks for at every update,
    is ``gradient_norm``'s: one multi-tensor norm a device, where fairseq's takes one a parameter."""

    def prepare_gradients(self) -> None:
        """What the gradients need before they are read (nothing, unless a subclass says)."""

    def clip_grad_norm(self, max_norm, aggregate_norm_fn=None):
        """fairseq's clipping (``utils.clip_grad_norm_``), its norms taken by ``gradient_norm``."""
        self.prepare_gradients()
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return super().clip_grad_norm(max_norm, aggregate_norm_fn)
        total_norm = gradient_norm(grads)
        if aggregate_norm_fn is not None:
            total_norm = aggregate_norm_fn(total_norm)
        if max_norm > 0:
            torch._foreach_mul_(grads, (float(max_norm) / (total_norm + 1e-6)).clamp_(max=1))
        return total_norm


@register_optimizer("adamw_torch", dataclass=AdamWTorchConfig)
class AdamWTorch(NormOfAllGradients):
    """fairseq's view of ``torch.optim.AdamW`` (fused or foreach)."""

    def __init__(self, cfg: AdamWTorchConfig, params):
        super().__init__(cfg)
        params = list(params)
        self._masters, self._flat = [], None
        if self.flattens(cfg, params):
            self._masters, self._flat = params, flatten_master_weights(params)
            params = [self._flat]
            logger.info("adamw_torch: --bf16's wrapper copies and zeroes the gradients one parameter at a time; "
                        "--memory-efficient-bf16 makes the same update with 4 bytes a parameter less and a few "
                        "kernels an update (docs/training.md)")
        self._optimizer = build_adamw(params, **self.optimizer_config)
        for group in self._optimizer.param_groups:
            group[UPDATES] = 0  # a new optimizer's count; a loaded state brings its own (or its steps)
        if self._flat is not None:
            # before training allocates its activations, as MasterWeightAdamW makes its own: made at the
            # first update, the flat masters' two moments (1.6 GB each at bart.large's size) would come
            # after a step's activations had been cached, in memory reserved on top of theirs
            make_state(self._optimizer)

    def prepare_gradients(self):
        if self._flat is not None:
            regather_grads(self._masters, self._flat)

    def multiply_grads(self, c):
        self.prepare_gradients()
        super().multiply_grads(c)

    def step(self, closure=None, scale=1.0, groups=None):
        self.prepare_gradients()
        for group in self.optimizer.param_groups:
            update = updates_done(self.optimizer, group) + 1
            group["eps"] = self.cfg.adam_eps / math.sqrt(1 - group["betas"][1] ** update)
            group[UPDATES] = update
        super().step(closure, scale, groups)

    @staticmethod
    def flattens(cfg: AdamWTorchConfig, params) -> bool:
        """Whether ``params`` are ``--bf16``'s per-parameter fp32 master copies (fairseq's
        ``--fp16`` passes them already flat)."""
        bf16 = getattr(cfg, "bf16", False) and not getattr(cfg, "memory_efficient_bf16", False)
        return bf16 and len(params) > 1 and all(torch.is_tensor(p) and p.dtype == torch.float32 for p in params)

    @property
    def optimizer_config(self):
        """The arguments that override those stored in a checkpoint (fairseq's convention)."""
        betas = self.cfg.adam_betas
        if isinstance(betas, str):
            betas = ast.literal_eval(betas)  # "(0.9, 0.999)", as fairseq's adam reads it
        elif OmegaConf.is_config(betas):
            betas = OmegaConf.to_container(betas)
        return {
            "lr": self.cfg.lr[0] if isinstance(self.cfg.lr, Collection) else self.cfg.lr,
            "betas": tuple(betas),
            "eps": self.cfg.adam_eps,
            "weight_decay": self.cfg.weight_decay,
        }

    @property
    def supports_flat_params(self):
        return True

    @property
    def supports_memory_efficient_fp16(self):
        """Under fairseq's memory-efficient wrapper the update keeps fp32 master weights itself
        (``MasterWeightAdamW``)."""
        return True
