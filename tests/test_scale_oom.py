"""Running out of GPU memory is any CUDA allocation failure, and a system stops at its first:
the classifier on the exceptions CUDA's libraries raise (built here, no GPU needed), and the
benchmarks' handling of them."""

import pytest
import torch

from benchmarks import memory_scaling
from benchmarks.common import CPU_TINY, make_dictionary, measure_step
from benchmarks.scale.group import Context
from benchmarks.scale.hardware import Peaks
from benchmarks.scale.oom import OomLedger, unless_oom
from benchmarks.scale.search import searched
from pagesum_recipes.profiling import is_out_of_memory

CPU = torch.device("cpu")
ALLOCATION_FAILURES = [
    torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.10 GiB total capacity)"),
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"),
    RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
    RuntimeError("[enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: can't allocate memory"),
]
EXHAUSTION_SYMPTOMS = [
    RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous "
                 "input."),
    RuntimeError("CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`"),
    RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR"),
]
BUGS = [
    RuntimeError("CUDA error: an illegal memory access was encountered"),
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x64 and 32x64)"),
    ValueError("CUBLAS_STATUS_ALLOC_FAILED"),  # not raised by torch: not a CUDA failure
]


@pytest.mark.parametrize("error", ALLOCATION_FAILURES, ids=lambda e: str(e)[:30])
def test_an_allocation_failure_of_any_cuda_library_is_out_of_memory(error):
    assert is_out_of_memory(error)


@pytest.mark.parametrize("error", EXHAUSTION_SYMPTOMS, ids=lambda e: str(e)[:30])
def test_a_status_that_exhaustion_also_causes_is_out_of_memory_only_on_a_nearly_full_device(error):
    assert is_out_of_memory(error, nearly_full=True)
    assert not is_out_of_memory(error, nearly_full=False)


@pytest.mark.parametrize("error", BUGS, ids=lambda e: str(e)[:30])
def test_other_errors_are_not_out_of_memory_even_on_a_full_device(error):
    assert not is_out_of_memory(error, nearly_full=True)


def raising(error):
    def call():
        raise error
    return call


def test_unless_oom_turns_a_cublas_allocation_failure_into_none():
    assert unless_oom(raising(ALLOCATION_FAILURES[1]), CPU) is None


def test_unless_oom_lets_any_other_error_through():
    with pytest.raises(RuntimeError, match="illegal memory access"):
        unless_oom(raising(BUGS[0]), CPU)


def test_a_training_step_that_cudnn_cannot_allocate_for_is_measured_as_oom():
    assert measure_step(raising(ALLOCATION_FAILURES[2]), CPU, 1, []) is None


def test_the_ledger_rules_out_every_configuration_at_least_as_large_as_an_oom():
    ledger = OomLedger()
    ledger.record("4", "per beam", (256, 8))
    assert ledger.stopped_at("4", "per beam", (900, 8)) == (256, 8)
    assert ledger.stopped_at("4", "per beam", (256, 8)) == (256, 8)
    assert ledger.stopped_at("4", "per beam", (900, 1)) is None  # smaller in one size: worth trying
    assert ledger.stopped_at("4", "shared", (900, 8)) is None  # another system
    assert ledger.stopped_at("5", "per beam", (900, 8)) is None  # another row


def test_the_ledger_reads_the_ooms_of_earlier_calls_from_their_records():
    records = [{"row": "4", "system": "per beam", "point": [256, 8], "status": "oom"},
               {"row": "4", "system": "shared", "point": [256, 8], "status": "ok"}]
    ledger = OomLedger.from_records(records)
    assert ledger.stopped_at("4", "per beam", (900, 8)) == (256, 8)
    assert ledger.stopped_at("4", "shared", (900, 8)) is None


def test_a_decoding_system_is_not_searched_again_after_its_first_oom():
    ctx = Context(CPU, torch.float32, CPU_TINY, Peaks(None, None, "test"))
    calls = []

    def search():
        calls.append(1)
        raise ALLOCATION_FAILURES[1]

    assert searched(ctx, "4", "per beam", [256, 8], search)["status"] == "oom"
    later = searched(ctx, "4", "per beam", [900, 8], search)
    assert later["status"] == "not tried" and later["stopped_at"] == [256, 8]
    assert len(calls) == 1


def test_row_2_stops_trying_bart_after_its_first_oom(monkeypatch):
    tried = []

    def fake_measure_step(step, device, repeats, modules):
        name = "BART" if modules[0] == "bart" else "PageSum"
        tried.append((name, current["pages"]))
        if name == "BART" and current["pages"] >= 2:
            return None
        return {"mb": 1.0, "s": 0.1}

    current = {}
    original = memory_scaling.paged_source

    def paged_source(dictionary, batch, pages, page_len, generator):
        current["pages"] = pages
        return original(dictionary, batch, pages, page_len, generator)

    monkeypatch.setattr(memory_scaling, "measure_step", fake_measure_step)
    monkeypatch.setattr(memory_scaling, "paged_source", paged_source)
    settings = type("Settings", (), dict(pages=[1, 2, 4, 8], page_len=8, tgt_len=4, repeats=1, seed=0))
    rows = memory_scaling.measure(settings, make_dictionary(CPU_TINY), {"PageSum": "pagesum", "BART": "bart"}, CPU)
    assert [pages for name, pages in tried if name == "BART"] == [1, 2]
    assert [pages for name, pages in tried if name == "PageSum"] == [1, 2, 4, 8]
    assert [row["tried"]["BART"] for row in rows] == [True, True, False, False]
    assert rows[3]["BART"] is None and rows[3]["PageSum"] is not None

