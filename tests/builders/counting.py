"""Counting the operators a piece of code dispatches: what each costs the host to launch."""

from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.step_operators import runs_a_kernel


class OperatorCount(TorchDispatchMode):
    """Every ATen operator dispatched while active (``count``), and those of them that compute or
    copy (``kernels``: a GPU runs a kernel for each; the rest are views, which launch nothing)."""

    def __init__(self):
        super().__init__()
        self.count, self.kernels = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        self.kernels += runs_a_kernel(func)
        return func(*args, **(kwargs or {}))
