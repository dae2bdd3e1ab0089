"""Every benchmark script runs end to end on a tiny grid and prints its tables. This checks
that the scripts work, not what they measure: the numbers are in docs/benchmarks/ (BENCHMARKS.md lists them). The scale
benchmark and the kit's other benchmarks (``kit.BENCHMARKS``) run through the GPU kit's rehearsal instead
(``test_device_kit.py``).

The tiny runs share one Python process (``builders/run_scripts.py``), each run as ``python -m`` runs
it: most of a script's time on a tiny grid would otherwise be the start of Python, torch and fairseq."""

import json
import os
import subprocess
import sys

import pytest

from builders.cli import REPO_ROOT

pytestmark = pytest.mark.slow  # a few seconds of model building per script

TINY_RUNS = {  # script: (arguments, what its tables must name)
    "hepos_memory": (["--device", "cpu", "--tokens", "512", "--max-full-tokens", "512", "--page-len", "256",
                      "--tgt-len", "16"],
                     ["HEPOS+full", "HEPOS+window", "HEPOS+lsh", "HEPOS+sinkhorn", "HEPOS+lsh (hybrid)",
                      "HEPOS+sinkhorn (hybrid)", "Sinkhorn, full cross", "PageSum", "Full attn"]),
    "awesome_memory": (["--device", "cpu", "--segments", "2", "--segment-len", "128", "--tgt-len", "32",
                        "--memory-slots", "16"],
                       ["AWESOME (attentive)", "AWESOME (attentive, K=4)", "AWESOME (compressive)", "Se3", "PageSum",
                        "HEPOS"]),
    "memory_plan": (["--device", "cpu", "--quick", "--repeats", "1"],
                    ["Memory model", "error", "PageSum-large, 20 x 1024", "adamw_torch", "adam"]),
    "hed_memory": (["--docs", "2", "3", "--doc-len", "64", "--tgt-len", "16"],
                   ["HED block-sparse", "HED dense mask", "PageSum doc pages"]),
    "memory_scaling": (["--device", "cpu", "--quick", "--size", "small", "--pages", "1", "2", "--page-len", "64",
                        "--tgt-len", "16"],
                       ["PageSum", "BART", "now / before"]),
    "memory_breakdown": (["--quick", "--time-repeats", "1"], ["+ chunked loss", "+ layer norms recomputed",
                                                               "+ bool dropout masks", "The same, against before",
                                                               "one encoder + decoder layer", "cross-attention",
                                                               "Step time at 2 layers"]),
    # PageSum's steps are measured by tests/test_compiled_training.py
    "compiled_training": (["--device", "cpu", "--system", "hed", "--layers", "2", "--repeats", "1", "--calls", "200"],
                          ["eager: operators / step", "compiled: operators outside", "gradient error",
                           "captured: operators outside the graphs", "a compiled call adds us"]),
    "search_memory": (["--pages", "1", "--page-len", "16", "--tokens", "4", "--repeats", "1"],
                      ["this checkout, step loop", "fixed shapes", "search adds MB"]),
    "update_operators": (["--layers", "1", "--repeats", "1"], ["--bf16, adamw_torch", "--memory-efficient-bf16, adamw_torch",
                                                             "kernels / update"]),
    "step_operators": (["--layers", "2", "--steps", "3"], ["step loop: operators / step",
                                                            "fixed shapes: outside it"]),
    "decoding_syncs": (["--steps", "4"], ["pagesum_plugin/generation/search_loop.py", "fairseq's loop",
                                         "fairseq/sequence_generator.py"]),
    "beam_cache": (["--device", "cpu", "--quick", "--pages", "2", "--beams", "2", "--page-len", "32", "--steps", "3",
                    "--long", "12", "--long-pages", "2", "--long-beam", "2"],
                   ["pages MB", "self-attn cache MB"]),
    "generation_speed": (["--device", "cpu", "--quick", "--pages", "1", "2", "--beams", "1", "2", "--page-len", "32",
                          "--out-len", "4", "--train-updates", "5", "--fidelity-docs", "8"],
                         ["summaries/s", "pruned differs"]),
    "checkpoint_stall": (["--epochs", "2", "--repeats", "1"], ["persistent workers", "workers stopped every epoch"]),
    "hf_generate": (["--device", "cpu", "--quick"], ["plugin's generator, step loop", "transformers generate",
                                                     "static cache"]),
    "hf_training": (["--device", "cpu", "--quick"], ["whole logits", "64 summary tokens at a time",
                                                     "The losses agree: yes"]),
}


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """{script: its run's returncode, stdout and stderr}: every tiny run, in one process."""
    results = tmp_path_factory.mktemp("benchmarks") / "results.json"
    commands = [[f"benchmarks.{script}", ["--threads", "1", *arguments]] for script, (arguments, _) in TINY_RUNS.items()]
    pythonpath = os.pathsep.join([REPO_ROOT, os.path.join(REPO_ROOT, "tests")])
    done = subprocess.run([sys.executable, "-m", "builders.run_scripts", str(results)], input=json.dumps(commands),
                          cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": pythonpath}, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return {run["module"].removeprefix("benchmarks."): run for run in json.loads(results.read_text())}


@pytest.mark.parametrize("script", list(TINY_RUNS))
def test_the_benchmark_prints_a_table_of_every_system_it_compares(script, tiny_runs):
    _, names = TINY_RUNS[script]
    result = tiny_runs[script]
    assert result["returncode"] == 0, result["stderr"][-3000:]
    stdout = result["stdout"]
    assert "CPU" in stdout.splitlines()[0], "the setup line names the machine"
    header = next(line for line in stdout.splitlines() if line.startswith("| "))
    for name in names:
        assert name in stdout, f"{name!r} missing from {script}'s output"
    assert "|---:" in stdout and len(header.split("|")) > 3


@pytest.mark.parametrize("script, arguments, names", [
    ("preprocess_throughput", ["--documents", "4", "--repeat", "1", "--workers", "1", "--bpe-vocab-size", "500"],
     ["arxiv, HEAD", "arxiv, new", "jsonl, HEAD", "jsonl, new", "tokenizer alone", "HF tokenizers alone",
      "startup of new", "| NLTK's Punkt |", "| HEAD |"]),
    ("rouge_speed", ["--pairs", "6", "--reference-pairs", "2", "--end-to-end-pairs", "4", "--repeat", "1"],
     ["rouge-score loop", "pagesum-score at HEAD", "pagesum-score --help"]),
])
def test_a_command_benchmark_times_old_and_new_in_one_table(script, arguments, names):
    result = subprocess.run([sys.executable, "-m", f"benchmarks.{script}", *arguments, "--before", "HEAD"],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    for name in names:
        assert name in result.stdout, f"{name!r} missing from {script}'s output"
    assert "CPU" in result.stdout and "|---" in result.stdout
