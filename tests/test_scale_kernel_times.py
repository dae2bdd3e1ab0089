"""Row 3 profiles one update at the batches of the MFU goals, and row 4 a decoding step, step loop
and captured: the device's busy time, split by kind of kernel (matrix products, attention,
inductor's kernels, the rest), and the longest kernels. On the CPU the same split runs over the
ATen operators' own times."""

import pytest
import torch
import torch.nn.functional as F
from torch._C._autograd import DeviceType

from benchmarks.beam_cache import generator_for
from benchmarks.common import CPU_TINY, ModelSize, build_model, paged_source
from benchmarks.scale import search
from benchmarks.scale.kernels import KERNEL_KINDS, durations
from benchmarks.scale.training import kernel_cells, kernel_times


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
    cells = kernel_cells({"update_s": 1.0, "kernels": {"busy_s": 0.5, "kinds_s": kinds}})
    assert cells == ["50%", "20% / 50% / 20% / 10%"]
    assert kernel_cells({"update_s": 1.0}) == ["-", "-"]  # a batch that was not profiled


@pytest.mark.parametrize("decoding", ["eager", "static"], ids=["step loop", "fixed shapes"])
def test_a_decoding_steps_kernels_are_two_searches_difference_per_step(decoding, monkeypatch):
    """The searches of 8 and 40 tokens differ by 32 steps and by nothing else: the encoder's
    kernels cancel. The profiler is replaced by a clock that charges 1 ms a decoder call and
    5 ms a search besides; a fixed-shape search's first search, unprofiled, is its capture."""
    torch.manual_seed(0)
    size = ModelSize(CPU_TINY.embed_dim, CPU_TINY.ffn_dim, 1, CPU_TINY.heads, CPU_TINY.vocab_words)
    task, model = build_model("pagesum_bart_large", size, "--max-source-positions", "16", dropout=0.0)
    sample = {"net_input": {"src_tokens": paged_source(task.dictionary, 1, 2, 16, torch.Generator().manual_seed(0))}}
    decoder_calls, searches = [], []
    model.decoder.layers[0].register_forward_pre_hook(lambda *_: decoder_calls.append(1))

    def charged(run, device):
        before = len(decoder_calls)
        run()
        return {"aten::mm": 1e-3 * (len(decoder_calls) - before), "aten::_encoder_and_search": 5e-3}

    def make(length):
        generator = generator_for(model.eval(), task.dictionary, 2, length, True, decoding=decoding)
        generate = generator.generate
        generator.generate = lambda *args: searches.append(length) or generate(*args)
        return generator

    monkeypatch.setattr(search, "kernel_seconds", charged)
    step = search.step_kernels(make, model, sample, torch.device("cpu"), captured=decoding != "eager")
    assert step["busy_s"] == pytest.approx(1e-3) and step["kinds_s"]["matmul"] == pytest.approx(1e-3)
    assert searches == ([8, 8, 40, 40] if decoding == "static" else [8, 40])


def test_the_raw_events_durations_by_name_are_the_profilers_own_totals():
    """``durations`` reads the profiler's raw events (40 times faster than ``key_averages``); on the
    CPU, where operators nest, its sums are the inclusive totals (a kernel nests nothing, so on CUDA
    they are its own times: tests/test_cuda.py)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        attention_step()()
    totals = {event.key: event.cpu_time_total * 1e-6 for event in profile.key_averages() if event.cpu_time_total > 0}
    seconds = durations(profile, DeviceType.CPU)
    assert set(seconds) == set(totals)
    for name in ("aten::addmm", "aten::linear", "aten::scaled_dot_product_attention", "aten::relu"):  # none nests
        # in an operator of its own name, which key_averages counts once
        assert seconds[name] == pytest.approx(totals[name], rel=1e-3, abs=2e-6)
