"""``--optimizer adafactor_batched``: fairseq's Adafactor, updating every parameter of one shape at once.

Adafactor (Shazeer and Stern, 2018) is what the PageSum and HEPOS authors trained with: no first
moment by default, and for a matrix only the row and column means of its squared gradients as its
second moment. fairseq's ``adafactor`` updates one parameter tensor at a time, some twenty kernels
each: 11,841 launches an update at ``bart.large``'s 513 tensors (``benchmarks.update_operators``),
each a few microseconds of work for a GPU and a launch for the host.

``BatchedAdafactor`` makes the same update with the same options, parameter by parameter the same
arithmetic, over stacks of parameters: the parameters of one shape, dtype and device are updated
as one batch (``shape_buckets``: ``bart.large`` has a handful of shapes), a batch of at most
``MASTER_BUCKET_BYTES`` of fp32 gradients unless one parameter is larger. Its state is
fairseq's, per parameter and under fairseq's names (a parameter's ``exp_avg_sq_row`` is a row of
its batch's), so checkpoints of either optimizer load into the other.

Three things differ from fairseq's:

* the gradients' factor that fairseq's memory-efficient wrapper would multiply the 16-bit gradients
  by in place (``--memory-efficient-bf16``: the trainer's 1 / sample size, the clipping, fp16's
  loss scale) is given to ``step``, which divides their fp32 copies, not rounded first (fp32
  gradients, fp32 masters under ``--bf16`` included, are multiplied in place, as fairseq does);
* ``--scale-parameter`` without ``--relative-step`` is refused: there, fairseq multiplies the
  learning rate by each parameter's root mean square in turn and keeps the product for the
  next parameter (``group["lr"]`` is overwritten), an accident of its code, not Adafactor.
  With ``--relative-step`` the two agree;
* ``--relative-step`` runs: fairseq's passes ``--lr`` along, which its Adafactor then refuses
  ("Cannot combine manual lr and relative_step options"); this one passes no learning rate.
"""

import ast
import math
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import register_optimizer
from omegaconf import II

from ..architectures import MASTER_BUCKET_BYTES
from ..errors import SettingError
from .adamw_torch import NormOfAllGradients, load_into_own_state


@dataclass
class BatchedAdafactorConfig(FairseqDataclass):
    """fairseq's ``adafactor`` options, under its names and defaults."""
    adafactor_eps: str = field(default="(1e-30, 1e-3)", metadata={
        "help": "(added to the squared gradients, the least parameter scale)"})
    clip_threshold: float = field(default=1.0, metadata={"help": "the largest root mean square of an update"})
    decay_rate: float = field(default=-0.8, metadata={
        "help": "the second moment keeps 1 - t^rate of itself at update t"})
    beta1: Optional[float] = field(default=None, metadata={"help": "a first moment with this decay (none: no first "
                                                                   "moment)"})
    weight_decay: float = field(default=0.0, metadata={"help": "weight decay, times the learning rate"})
    scale_parameter: bool = field(default=False, metadata={"help": "the learning rate times each parameter's root "
                                                                   "mean square (needs --relative-step)"})
    relative_step: bool = field(default=False, metadata={"help": "the learning rate min(0.01, 1/sqrt(t)) instead of "
                                                                 "--lr"})
    warmup_init: bool = field(default=False, metadata={"help": "with --relative-step: min(1e-6 t, 1/sqrt(t))"})
    lr: List[float] = II("optimization.lr")


def shape_buckets(params: List[torch.Tensor], bucket_bytes: int) -> Iterator[List[torch.Tensor]]:
    """``params`` grouped by shape, dtype and device, in order of first appearance, each group cut
    into lists whose fp32 copies hold about ``bucket_bytes`` (a larger parameter is a list of its own)."""
    groups: Dict[Tuple, List[torch.Tensor]] = defaultdict(list)
    for p in params:
        groups[(tuple(p.shape), p.dtype, p.device)].append(p)
    for group in groups.values():
        per_bucket = max(1, bucket_bytes // (4 * group[0].numel()))
        for start in range(0, len(group), per_bucket):
            yield group[start:start + per_bucket]


def stacked_fp32(tensors: List[torch.Tensor]) -> torch.Tensor:
    """(n, *shape) fp32 copy of ``tensors``: one stack, and one cast for 16-bit ones."""
    return torch.stack(tensors).float()


def batch_rms(update: torch.Tensor) -> torch.Tensor:
    """(n,) each parameter's root mean square, as fairseq's ``_rms``: its 2-norm over sqrt(numel)."""
    per_parameter = update[0].numel()
    return torch.linalg.vector_norm(update.reshape(update.size(0), -1), dim=1) / per_parameter ** 0.5


@dataclass
class Bucket:
    """Parameters of one shape, dtype and device, and their state stacked: ``exp_avg_sq_row``
    (n, *shape[:-1]) and ``exp_avg_sq_col`` (n, *shape[:-2], shape[-1]) for a matrix,
    ``exp_avg_sq`` (n, *shape) otherwise, ``exp_avg`` (n, *shape) with ``beta1``; fp32."""
    group: int  # its parameter group's index
    params: List[torch.Tensor]
    stacks: Dict[str, torch.Tensor]


class BatchedAdafactor(torch.optim.Optimizer):
    """fairseq's ``Adafactor`` (``fairseq/optim/adafactor.py``), a bucket of same-shaped
    parameters at once (``shape_buckets``).

    A bucket's state is made with the optimizer, stacked (``Bucket``); ``self.state[p]`` holds
    views of its stacks and the parameter's update count, which is what fairseq saves. A
    parameter without a gradient is left alone, as in fairseq: the others of its bucket are
    updated as a batch of their own."""

    supports_step_with_scale = False  # True for 16-bit parameters: see __init__

    def __init__(self, params, lr: Optional[float] = None, eps=(1e-30, 1e-3), clip_threshold: float = 1.0,
                 decay_rate: float = -0.8, beta1: Optional[float] = None, weight_decay: float = 0.0,
                 scale_parameter: bool = False, relative_step: bool = False, warmup_init: bool = False,
                 bucket_bytes: int = MASTER_BUCKET_BYTES):
        if lr is not None and relative_step:
            raise SettingError("Adafactor: a manual learning rate and --relative-step cannot be combined")
        if warmup_init and not relative_step:
            raise SettingError("Adafactor: --warmup-init needs --relative-step")
        if scale_parameter and not relative_step:
            raise SettingError("adafactor_batched: --scale-parameter needs --relative-step (without it, fairseq's "
                               "adafactor compounds the learning rate from one parameter to the next)")
        self.bucket_bytes, self.buckets = bucket_bytes, []
        super().__init__(params, dict(lr=lr, eps=eps, clip_threshold=clip_threshold, decay_rate=decay_rate,
                                      beta1=beta1, weight_decay=weight_decay, scale_parameter=scale_parameter,
                                      relative_step=relative_step, warmup_init=warmup_init))
        # 16-bit parameters (fairseq's memory-efficient wrapper): the wrapper passes the gradients' factor to
        # ``step``, which divides their fp32 copies. fp32 ones (no wrapper, or fp32 masters under --bf16) take
        # the factor in place: fairseq's --bf16 wrapper never resets a factor it passed on, so it would compound
        self.supports_step_with_scale = any(p.dtype in (torch.float16, torch.bfloat16)
                                            for group in self.param_groups for p in group["params"])

    @torch.no_grad()
    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        """The group, its buckets, and every parameter's state at update 0."""
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for params in shape_buckets(group["params"], self.bucket_bytes):
            n, shape, device = len(params), params[0].shape, params[0].device
            stacks = {}
            if group["beta1"] is not None:
                stacks["exp_avg"] = torch.zeros((n, *shape), device=device)
            if len(shape) >= 2:
                stacks["exp_avg_sq_row"] = torch.zeros((n, *shape[:-1]), device=device)
                stacks["exp_avg_sq_col"] = torch.zeros((n, *shape[:-2], shape[-1]), device=device)
            else:
                stacks["exp_avg_sq"] = torch.zeros((n, *shape), device=device)
            for i, p in enumerate(params):
                self.state[p] = {"step": 0, **{name: stack[i] for name, stack in stacks.items()}}
            self.buckets.append(Bucket(len(self.param_groups) - 1, params, stacks))

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """torch's loading, the state kept in its buckets' stacks and in fp32 (``load_into_own_state``).
        fairseq's ``adafactor`` saves the same names (and an ``RMS``, not kept)."""
        load_into_own_state(self, state_dict)

    def learning_rates(self, group: Dict[str, Any], step: int,
                       params: List[torch.Tensor]) -> Union[float, torch.Tensor]:
        """fairseq's ``_get_lr``: the external rate, or the relative step, times each parameter's
        root mean square with ``scale_parameter`` ((n, 1, ...) then)."""
        if not group["relative_step"]:
            return group["lr"]
        min_step = 1e-6 * step if group["warmup_init"] else 1e-2
        relative = min(min_step, 1.0 / math.sqrt(step))
        if not group["scale_parameter"]:
            return relative
        scales = batch_rms(stacked_fp32(params)).clamp_(min=group["eps"][1]) * relative  # (n,)
        return scales.view(-1, *[1] * params[0].dim())

    @torch.no_grad()
    def step(self, closure=None, scale: Union[float, torch.Tensor] = 1.0):
        """One update from the gradients divided by ``scale`` (``supports_step_with_scale``)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for bucket in self.buckets:
            # the parameters with a gradient, by their update count: the whole bucket, unless some were skipped
            by_step: Dict[int, List[int]] = defaultdict(list)
            for i, p in enumerate(bucket.params):
                if p.grad is not None:
                    by_step[self.state[p]["step"]].append(i)
            group = self.param_groups[bucket.group]
            for indices in by_step.values():
                if len(indices) == len(bucket.params):
                    self.update(group, bucket.params, bucket.stacks, scale)
                    continue
                rows = torch.tensor(indices, device=bucket.params[0].device)
                stacks = {name: stack.index_select(0, rows) for name, stack in bucket.stacks.items()}
                self.update(group, [bucket.params[i] for i in indices], stacks, scale)
                for name, stack in stacks.items():
                    bucket.stacks[name].index_copy_(0, rows, stack)
        return loss

    def update(self, group: Dict[str, Any], params: List[torch.Tensor], stacks: Dict[str, torch.Tensor],
               scale: Union[float, torch.Tensor]) -> None:
        """fairseq's update of each of ``params`` (one shape, one update count), as one batch;
        ``stacks``: their state (``Bucket``), updated in place."""
        step = self.state[params[0]]["step"] + 1
        for p in params:
            self.state[p]["step"] = step
        per_parameter = [1] * params[0].dim()  # broadcasts a (n,) factor over each parameter

        grad = stacked_fp32([p.grad for p in params])  # (n, *shape)
        if torch.is_tensor(scale) or scale != 1.0:  # a tensor is never compared: that would wait for the device
            grad.div_(scale)
        lr = self.learning_rates(group, step, params)  # a float, or (n, 1, ...)
        beta2t = 1.0 - math.pow(step, group["decay_rate"])
        update = grad.square().add_(group["eps"][0])  # (n, *shape): fairseq's grad ** 2 + eps, one copy
        if "exp_avg_sq_row" in stacks:  # a matrix: its second moment factored
            row, col = stacks["exp_avg_sq_row"], stacks["exp_avg_sq_col"]  # (n, ..., rows), (n, ..., cols)
            row.mul_(beta2t).add_(update.mean(dim=-1), alpha=1.0 - beta2t)
            col.mul_(beta2t).add_(update.mean(dim=-2), alpha=1.0 - beta2t)
            del update
            row_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)  # (n, ..., rows, 1)
            col_factor = col.unsqueeze(-2).rsqrt()  # (n, ..., 1, cols)
            update = torch.mul(row_factor, col_factor).mul_(grad)
        else:
            second = stacks["exp_avg_sq"]
            second.mul_(beta2t).add_(update, alpha=1.0 - beta2t)
            update = second.rsqrt().mul_(grad)
        del grad
        update.div_((batch_rms(update) / group["clip_threshold"]).clamp_(min=1.0).view(-1, *per_parameter))
        update.mul_(lr)
        if group["beta1"] is not None:
            first = stacks["exp_avg"]
            first.mul_(group["beta1"]).add_(update, alpha=1 - group["beta1"])
            update = first

        weights = stacked_fp32(params)  # (n, *shape)
        if group["weight_decay"] != 0:
            if torch.is_tensor(lr):
                weights.add_(weights * (-group["weight_decay"] * lr))
            else:
                weights.add_(weights, alpha=-group["weight_decay"] * lr)
        weights.sub_(update)
        torch._foreach_copy_(params, list(weights.unbind(0)))  # rounded to the parameters' dtype


def epsilons(text: str) -> Tuple[float, float]:
    """--adafactor-eps, written as fairseq's: "(1e-30, 1e-3)"."""
    try:
        first, second = (float(eps) for eps in ast.literal_eval(text))
    except (ValueError, TypeError, SyntaxError):
        raise SettingError(f"--adafactor-eps {text}: not a pair of numbers, as (1e-30, 1e-3)") from None
    return first, second


@register_optimizer("adafactor_batched", dataclass=BatchedAdafactorConfig)
class FairseqBatchedAdafactor(NormOfAllGradients):
    """fairseq's view of ``BatchedAdafactor``: fairseq's ``adafactor`` options."""

    def __init__(self, cfg: BatchedAdafactorConfig, params):
        super().__init__(cfg)
        self._optimizer = BatchedAdafactor(params, **self.optimizer_config)

    @property
    def optimizer_config(self):
        """The arguments that override those stored in a checkpoint (fairseq's convention)."""
        lr = self.cfg.lr[0] if isinstance(self.cfg.lr, Collection) else self.cfg.lr
        return {
            "lr": None if self.cfg.relative_step else lr,
            "eps": epsilons(self.cfg.adafactor_eps),
            "clip_threshold": self.cfg.clip_threshold,
            "decay_rate": self.cfg.decay_rate,
            "beta1": self.cfg.beta1,
            "weight_decay": self.cfg.weight_decay,
            "scale_parameter": self.cfg.scale_parameter,
            "relative_step": self.cfg.relative_step,
            "warmup_init": self.cfg.warmup_init,
        }

    @property
    def supports_memory_efficient_fp16(self):
        return True

    @property
    def supports_flat_params(self):
        return False
