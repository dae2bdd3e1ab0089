"""Counting the operators a piece of code dispatches: what each costs the host to launch."""

from torch.utils._python_dispatch import TorchDispatchMode


class OperatorCount(TorchDispatchMode):
    """Every ATen operator dispatched while active (``count``)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))
