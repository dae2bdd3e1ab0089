"""Row 3 profiles one update at the batches of the MFU goals: the device's busy time, split by kind
of kernel (matrix products, attention, inductor's kernels, the rest), and the longest kernels.
On the CPU the same split runs over the ATen operators' own times."""

import pytest
import torch
import torch.nn.functional as F

from benchmarks.scale.training import KERNEL_KINDS, kernel_cells, kernel_times


def attention_step():
    torch.manual_seed(0)
    projection = torch.nn.Linear(32, 32)
    x = torch.randn(64, 32)

    def step():
        q = projection(x).view(1, 4, 16, 32)  # (batch, heads, positions, head_dim)
        F.scaled_dot_product_attention(q, q, q, is_causal=True).relu().sum().backward()

    return step


def test_an_updates_time_is_split_by_kind_of_kernel_and_every_kernel_counts_once():
    kernels = kernel_times(attention_step(), torch.device("cpu"))
    kinds = kernels["kinds_s"]
    assert list(kinds) == [kind for kind, _ in KERNEL_KINDS] + ["other"]
    assert kinds["matmul"] > 0 and kinds["attention"] > 0 and kinds["other"] > 0
    assert kinds["compiled"] == 0  # nothing here was compiled
    assert kernels["busy_s"] == pytest.approx(sum(kinds.values()))
    longest = [seconds for _, seconds in kernels["longest"]]
    assert longest == sorted(longest, reverse=True) and longest[0] <= kernels["busy_s"]
    assert any("attention" in name for name, _ in kernels["longest"])


def test_the_table_gives_the_busy_share_of_the_update_and_each_kinds_share_of_the_busy_time():
    kinds = {"attention": 0.1, "matmul": 0.25, "compiled": 0.1, "other": 0.05}
    assert kernel_cells({"update_s": 1.0, "kernels": {"busy_s": 0.5, "kinds_s": kinds}}) == ["50%", "20% / 50% / 20% / 10%"]
    assert kernel_cells({"update_s": 1.0}) == ["-", "-"]  # a batch that was not profiled
