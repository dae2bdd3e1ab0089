"""The scale benchmark's arithmetic: the model FLOPs of a training update, the weights counted
from the dimensions, the operator counts behind the estimates, the estimate that every default
group fits in a call, and the GPU memory readings."""

import shlex
from pathlib import Path

import pytest
import torch
from torch.nn.attention import sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.beam_cache import generator_for
from benchmarks.common import (ATTENTION_KERNELS, BART_LARGE, Launched, ModelSize, build_model, cuda_peaks,
                               label_smoothed_loss, paged_source, summary_io)
from benchmarks.generation_speed import net_input
from benchmarks.scale import costs, results
from benchmarks.scale.cli import GROUP_BUDGET_SECONDS, main, parse_args
from benchmarks.scale.hardware import peaks_by_name

SMALL = ModelSize(embed_dim=64, ffn_dim=256, layers=2, heads=4, vocab_words=500)
H100 = peaks_by_name("NVIDIA H100 80GB HBM3")


@pytest.fixture(scope="module")
def small_pagesum():
    torch.manual_seed(0)
    task, model = build_model("pagesum_bart_large", SMALL, "--max-source-positions", "32", dropout=0.0)
    return task.dictionary, model


def test_the_weights_counted_from_the_dimensions_are_the_models_linear_weights(small_pagesum):
    _, model = small_pagesum
    assert costs.weight_counts(SMALL) == costs.matmul_weights(model)


@pytest.mark.parametrize("batch, pages, page_len, tgt_len", [(1, 2, 32, 8), (2, 3, 32, 16)])
def test_the_training_flops_formula_counts_what_torchs_flop_counter_counts(small_pagesum, batch, pages, page_len,
                                                                           tgt_len):
    dictionary, model = small_pagesum
    generator = torch.Generator().manual_seed(0)
    src_tokens = paged_source(dictionary, batch, pages, page_len, generator)
    target, prev_output_tokens = summary_io(dictionary, batch, tgt_len, generator)
    with sdpa_kernel(ATTENTION_KERNELS["math"]), FlopCounterMode(display=False) as counter:
        logits, _ = model(src_tokens, None, prev_output_tokens)
        label_smoothed_loss(logits, target, dictionary.pad()).backward()
    model.zero_grad()
    formula = costs.training_flops(costs.matmul_weights(model), SMALL.layers, SMALL.embed_dim, batch, pages,
                                   page_len, tgt_len)
    assert formula == pytest.approx(counter.get_total_flops(), rel=1e-3)  # the page mixing is left out


def decoding_operators(layers: int, steps: int) -> int:
    size = ModelSize(embed_dim=32, ffn_dim=64, layers=layers, heads=2, vocab_words=60)
    torch.manual_seed(0)
    task, model = build_model("pagesum_bart_large", size, "--max-source-positions", "16", "--max-target-positions",
                              "32", dropout=0.0)
    model.eval()
    sample = net_input(paged_source(task.dictionary, 2, 3, 16, torch.Generator().manual_seed(0)), task.dictionary.pad())
    generator = generator_for(model, task.dictionary, 4, steps, shared=True)
    with Launched() as counter:
        generator.generate([model], sample)
    return counter.operators


@pytest.mark.slow  # four models and eight searches under a Python dispatch mode
def test_the_estimates_operators_per_decoding_step_are_what_a_step_dispatches():
    for layers in (2, 6):
        per_step = (decoding_operators(layers, 8) - decoding_operators(layers, 4)) / 4
        assumed = costs.DECODER_STEP_OPS[0] + costs.DECODER_STEP_OPS[1] * layers
        assert per_step == pytest.approx(assumed, rel=0.15), layers


def test_the_estimates_operators_per_training_pass_are_what_a_pass_dispatches(small_pagesum):
    dictionary, model = small_pagesum
    generator = torch.Generator().manual_seed(0)
    src_tokens = paged_source(dictionary, 1, 2, 32, generator)
    target, prev_output_tokens = summary_io(dictionary, 1, 8, generator)
    with Launched() as counter:
        logits, _ = model(src_tokens, None, prev_output_tokens)
        label_smoothed_loss(logits, target, dictionary.pad()).backward()
    model.zero_grad()
    assumed = costs.TRAINING_PASS_OPS[0] + costs.TRAINING_PASS_OPS[1] * SMALL.layers
    assert counter.operators == pytest.approx(assumed, rel=0.15)


def gpu_groups():
    return parse_args(["--device", "cuda"]).groups


@pytest.mark.parametrize("group", gpu_groups(), ids=lambda group: group.id)
def test_every_default_gpu_group_is_estimated_to_finish_within_the_budget_on_an_h100(group):
    cost = group.cost(group.settings, BART_LARGE, 2)  # bf16
    assert cost.seconds(H100) < GROUP_BUDGET_SECONDS


FIRST_VISIT = Path(__file__).resolve().parent.parent / "docs/benchmarks/gpu/2026-11-26-h100/scale.jsonl"
CHANGED_SINCE = {"1": "row 1 runs a second optimizer since", "3": "row 3 runs compiled layers too since",
                 "4": "row 4 profiles its searches since", "5:256": "row 5 runs a captured search too since",
                 "6": "row 6 runs a captured search too since"}


def visited_groups():
    """(group, the command's options, measured seconds) of every group of the first H100 visit."""
    runs = [r for r in results.read(str(FIRST_VISIT)) if r["type"] == "run" and r["status"] == "done"]
    for run in runs:
        options = shlex.split(run["command"].split(" --rows ")[1])[1:]
        kept = [o for o, before in zip(options, [None, *options]) if o not in ("--results", "--time-left")
                and before not in ("--results", "--time-left")]
        yield pytest.param(run["group"], kept, run["seconds"], id=run["group"])


@pytest.mark.parametrize("group_id, options, measured", list(visited_groups()))
def test_the_estimates_are_calibrated_on_the_first_h100_visit(group_id, options, measured):
    """Each group's estimate, less the process's start-up (which the measured seconds leave out),
    within 0.6-1.6x what the group took on the H100, with the options it ran with."""
    changed = CHANGED_SINCE.get(group_id, CHANGED_SINCE.get(group_id.split(":")[0]))
    if changed:
        pytest.skip(changed)
    (group,) = parse_args(["--device", "cuda", "--rows", group_id, *options]).groups
    estimate = group.cost(group.settings, BART_LARGE, 2).seconds(H100) - costs.START_SECONDS
    assert 0.6 <= estimate / measured <= 1.6, f"estimate {estimate:.0f} s, measured {measured:.0f} s"


def test_a_decoding_estimate_grows_with_the_summary_length_and_its_device_time_with_the_batch():
    def search(batch, steps):
        return costs.beam_search(BART_LARGE, 2, batch, 4, 7, 1024, steps)

    assert search(1, 900).seconds(H100) > search(1, 256).seconds(H100)
    device = [sum(search(batch, 256).parts(H100)[kind] for kind in ("compute", "memory")) for batch in (1, 8, 64)]
    assert device[0] < device[1] < device[2]


def test_host_and_device_time_overlap_the_slower_sets_the_pace():
    """Eager decoding is host-bound at batch 1 (the launches), and a large enough batch makes
    the device the slower of the two."""
    def parts(batch):
        cost = costs.beam_search(BART_LARGE, 2, batch, 4, 7, 1024, 256)
        return cost.parts(H100), cost.seconds(H100)

    small, seconds = parts(1)
    assert seconds == pytest.approx(small["host"]) and small["host"] > small["compute"] + small["memory"]
    large, seconds = parts(128)
    assert seconds == pytest.approx(large["compute"] + large["memory"]) and seconds > large["host"]


def test_one_copy_of_the_pages_per_beam_moves_more_than_pages_shared_by_the_beams():
    shared = costs.beam_search(SMALL, 2, 8, 4, 7, 1024, 100, shared=True)
    per_beam = costs.beam_search(SMALL, 2, 8, 4, 7, 1024, 100, shared=False)
    assert per_beam.bytes > shared.bytes


def test_the_whole_gpu_peak_adds_what_the_driver_counts_outside_the_allocator(monkeypatch):
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (70 * gib, 80 * gib))  # 10 GiB in use now
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 9 * gib)  # 1 GiB outside: context, workspaces
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device: 12 * gib)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 11 * gib)
    peaks = cuda_peaks(torch.device("cuda"))
    assert (peaks.allocated, peaks.reserved, peaks.device) == (11 * gib, 12 * gib, 13 * gib)


def test_the_cpu_has_no_allocator_peaks():
    assert cuda_peaks(torch.device("cpu")) is None


def test_the_plan_estimates_every_selected_group_on_both_gpus(capsys):
    assert main(["--device", "cuda", "--plan", "--rows", "4"]) == 0
    printed = capsys.readouterr().out
    assert "| 4:256 |" in printed and "| 4:900 |" in printed and "H200 s" in printed

