"""``python -m benchmarks.scale``: run row groups, append their results, print their tables;
or ``--report`` (the tables of a results file), ``--plan`` (the groups' estimates) and
``--list`` (the selected groups' names)."""

import argparse
import os
import platform
import shlex
import sys
import time
import traceback
from typing import Dict, List, Optional

import fairseq
import torch
from torch.nn.attention import sdpa_kernel

from benchmarks.common import (ATTENTION_KERNELS, BART_LARGE, CPU_TINY, ModelSize, add_device_args,
                               describe_device, device_defaults, dtype_name, free_memory, markdown_table, start)
from benchmarks.scale import results
from benchmarks.scale.group import Context, Group
from benchmarks.scale.hardware import device_peaks, peaks_by_name
from benchmarks.scale.oom import OomLedger
from benchmarks.scale.registry import ROWS, all_groups, select
from benchmarks.scale.report import report

GROUP_BUDGET_SECONDS = 8 * 60  # what one group may take on an H100, by its estimate
PLANNED_GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA H200")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale",
                                     description="PageSum at bart.large scale: the rows of the scale benchmark.")
    add_device_args(parser)
    parser.add_argument("--rows", nargs="+", metavar="ROW", help="rows (4) or row groups (4:900) to run, in report "
                        "order (default: all; --list names them)")
    parser.add_argument("--results", help="the JSON-lines results file that each call appends to (default: "
                        "runs/scale-DEVICE.jsonl)")
    parser.add_argument("--report", action="store_true", help="print the tables of --results and exit")
    parser.add_argument("--plan", action="store_true", help="print each selected group's estimate on an H100 and an "
                        "H200 and exit (no GPU needed: --device cuda plans the GPU run)")
    parser.add_argument("--list", action="store_true", help="print the selected groups' names, each with its estimate "
                        "in seconds on an H100, and exit")
    parser.add_argument("--tiny", action="store_true", help="pagesum_tiny's dimensions on any device (the CPU's "
                        "always): a smoke run of the CUDA paths")
    parser.add_argument("--time-left", type=float, help="seconds this call may still take: a group whose estimate "
                        "exceeds what is left is skipped (recorded as skipped)")
    parser.add_argument("--pages", type=int, help="row 1: pages (default: 20 on CUDA, 2 on CPU)")
    parser.add_argument("--page-len", type=int, help="tokens per page (default: 1024 on CUDA, 32 on CPU)")
    parser.add_argument("--tgt-len", type=int, help="rows 1 and 3: summary tokens (default: 1024 on CUDA, 8 on CPU)")
    parser.add_argument("--growth-pages", type=int, nargs="+", help="row 2 (default: 1 2 4 8 16 20; CPU: 1 2)")
    parser.add_argument("--growth-tgt-len", type=int, help="row 2: summary tokens (default: 256 on CUDA, 8 on CPU)")
    parser.add_argument("--mfu-pages", type=int, help="row 3: pages (default: 7 on CUDA, 2 on CPU)")
    parser.add_argument("--max-batch", type=int, help="row 3: largest batch tried (default: 64 on CUDA, 2 on CPU)")
    parser.add_argument("--decode-pages", type=int, help="rows 4-6: pages (default: 7 on CUDA, 2 on CPU)")
    parser.add_argument("--out-lens", type=int, nargs="+", help="rows 4-5: summary tokens, one group each (default: "
                        "256 900; CPU: 4 8)")
    parser.add_argument("--batches", type=int, nargs="+", help="rows 4-6: batch sizes (default: 1 8; CPU: 1 2)")
    parser.add_argument("--beam", type=int, default=4, help="rows 4-5: beam size (row 6: the dataset's)")
    parser.add_argument("--top-pages", type=int, help="row 5: pages kept (default: 2 on CUDA, 1 on CPU)")
    parser.add_argument("--production-datasets", nargs="+", default=["arxiv", "govreport"],
                        help="row 6: datasets whose generation defaults are decoded, one group each")
    parser.add_argument("--production-len-cap", type=int, help="row 6: cap on the summary lengths (default: none on "
                        "CUDA, 8 on CPU)")
    parser.add_argument("--repeats", type=int, help="timed runs per configuration (default: 2, --quick: 1)")
    parser.add_argument("--train-updates", type=int, help="updates of the fidelity models (default: 600, --quick: 30)")
    parser.add_argument("--fidelity-docs", type=int, help="held-out documents of the fidelity table (default: 200, "
                        "--quick: 16)")
    parser.add_argument("--peak-tflops", type=float, help="the GPU's bf16 dense peak in TFLOP/s (default: GPU_PEAKS)")
    parser.add_argument("--peak-bandwidth", type=float, help="the GPU's memory bandwidth in TB/s (default: GPU_PEAKS)")
    args = device_defaults(parser.parse_args(argv), pages=(20, 2), page_len=(1024, 32), tgt_len=(1024, 8),
                           growth_pages=([1, 2, 4, 8, 16, 20], [1, 2]), growth_tgt_len=(256, 8), mfu_pages=(7, 2),
                           max_batch=(64, 2), decode_pages=(7, 2), out_lens=([256, 900], [4, 8]),
                           batches=([1, 8], [1, 2]), top_pages=(2, 1))
    if not 0 < args.top_pages < args.decode_pages:
        parser.error(f"--top-pages must keep fewer than the {args.decode_pages} pages of --decode-pages")
    args.repeats = args.repeats or (1 if args.quick else 2)
    args.train_updates = args.train_updates or (30 if args.quick else 600)
    args.fidelity_docs = args.fidelity_docs or (16 if args.quick else 200)
    args.production_len_cap = args.production_len_cap or (None if args.device == "cuda" else 8)
    args.results = args.results or f"runs/scale-{args.device}.jsonl"
    try:
        args.groups = select(all_groups(args), args.rows)
    except ValueError as error:
        parser.error(str(error))
    return args


def model_size(args: argparse.Namespace) -> ModelSize:
    """bart.large on CUDA; pagesum_tiny's dimensions on the CPU or with --tiny."""
    return BART_LARGE if args.device == "cuda" and not args.tiny else CPU_TINY


def element_bytes(args: argparse.Namespace) -> int:
    return 2 if args.device == "cuda" else 4  # bf16 on CUDA, fp32 on the CPU


def listing(args: argparse.Namespace) -> str:
    """One line per selected group: its id and its estimate in seconds on the first planned GPU."""
    size, peaks = model_size(args), peaks_by_name(PLANNED_GPUS[0])
    return "\n".join(f"{group.id} {group.cost(group.settings, size, element_bytes(args)).seconds(peaks):.0f}"
                     for group in args.groups)


def plan(args: argparse.Namespace) -> str:
    """Each selected group's estimate on the planned GPUs, and the total."""
    size, element = model_size(args), element_bytes(args)
    peaks = [peaks_by_name(name) for name in PLANNED_GPUS]
    rows, totals = [], [0.0] * len(peaks)
    for group in args.groups:
        cost = group.cost(group.settings, size, element)
        seconds = [cost.seconds(p) for p in peaks]
        totals = [t + s for t, s in zip(totals, seconds)]
        rows.append([group.id, group.title] + [f"{s:.0f}" for s in seconds] + [cost.describe(peaks[0])])
    rows.append(["all", f"{len(args.groups)} groups"] + [f"{t:.0f}" for t in totals] + [""])
    header = ["group", "what", "H100 s", "H200 s", "how (H100)"]
    return (f"Estimates at {'bart.large' if size is BART_LARGE else 'pagesum_tiny'}'s dimensions (see "
            f"benchmarks/scale/costs.py); every group must stay under {GROUP_BUDGET_SECONDS} s on an H100.\n\n"
            + markdown_table(header, rows))


def run_record(group: Group, ctx: Context, command: str) -> Dict:
    size = ctx.size
    gpu = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else None
    return {"type": "run", "run": results.new_run_id(), "group": group.id, "row": group.row, "title": group.title,
            "settings": group.settings, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": command, "device": ctx.device.type, "machine": describe_device(ctx.device), "gpu": gpu,
            "cuda": torch.version.cuda if gpu else None, "torch": torch.__version__, "fairseq": fairseq.__version__,
            "python": platform.python_version(), "dtype": dtype_name(ctx.dtype),
            "model": f"{size.layers}+{size.layers} layers, d={size.embed_dim}, ffn={size.ffn_dim}, {size.heads} heads, "
                     f"random weights",
            "peaks": {"flops": ctx.peaks.flops, "bandwidth": ctx.peaks.bandwidth, "source": ctx.peaks.source}}


def run_group(group: Group, ctx: Context, args: argparse.Namespace, command: str, deadline: Optional[float]) -> bool:
    """Estimates, runs and stores one group, and prints its tables; False if it failed."""
    cost = group.cost(group.settings, ctx.size, ctx.element)
    run = run_record(group, ctx, command)
    run["estimate_s"] = cost.seconds(ctx.peaks)
    where = "this GPU" if ctx.peaks.flops and ctx.peaks.bandwidth else "an H100 (this device's peaks are unknown)"
    print(f"Group {group.id}, {group.title}. Estimate on {where}: {cost.describe(ctx.peaks)}.", flush=True)
    if deadline is not None and run["estimate_s"] > deadline - time.monotonic():
        run.update(status="skipped", error=f"estimated {run['estimate_s']:.0f} s, "
                                           f"{max(0.0, deadline - time.monotonic()):.0f} s left")
        results.append(args.results, [run])
        print(f"Group {group.id} skipped: {run['error']}.", flush=True)
        return True
    started = time.monotonic()
    try:
        with sdpa_kernel(ATTENTION_KERNELS["fused"]):  # row 2 also runs under "math", in its own context
            measurements = group.measure(group.settings, ctx)
        free_memory(ctx.device)  # the group's models are gone with its call
    except Exception as error:  # one broken group must not cost the others: recorded, and the exit status says so
        traceback.print_exc()
        run.update(status="failed", seconds=time.monotonic() - started, error=f"{type(error).__name__}: {error}"[:500])
        results.append(args.results, [run])
        print(f"Group {group.id} failed after {run['seconds']:.0f} s: {run['error']}", flush=True)
        return False
    run.update(status="done", seconds=time.monotonic() - started)
    records = [{"type": "measurement", "run": run["run"], "row": group.row, "group": group.id, **m}
               for m in measurements]
    results.append(args.results, records + [run])
    row = next(row for row in ROWS if row.id == group.row)
    print(*row.render(records, {run["run"]: run}), f"Group {group.id} done in {run['seconds']:.0f} s "
          f"(estimate {run['estimate_s']:.0f} s); results appended to {args.results}.", sep="\n\n", end="\n\n",
          flush=True)
    return True


def earlier_ooms(path: str, machine: str) -> OomLedger:
    """The OOMs that earlier calls on this machine recorded in the results file."""
    if not os.path.exists(path):
        return OomLedger()
    records = results.read(path)
    runs = {r["run"] for r in records if r["type"] == "run" and r["status"] == "done" and r["machine"] == machine}
    return OomLedger.from_records(r for r in records if r["type"] == "measurement" and r["run"] in runs)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.report:
        print(report(results.read(args.results)))
        return 0
    if args.list:
        print(listing(args))
        return 0
    if args.plan:
        print(plan(args))
        return 0
    deadline = None if args.time_left is None else time.monotonic() + args.time_left
    device, dtype = start(args)
    ctx = Context(device, dtype, model_size(args),
                  device_peaks(device, args.peak_tflops, args.peak_bandwidth),
                  earlier_ooms(args.results, describe_device(device)))
    command = "python -m benchmarks.scale " + shlex.join(sys.argv[1:] if argv is None else argv)
    cuda = f", CUDA {torch.version.cuda}" if device.type == "cuda" else ""
    print(f"Machine: {describe_device(device)}{cuda}, fairseq {fairseq.__version__}, Python "
          f"{platform.python_version()}. Peaks: {ctx.peaks.describe()}. Groups: "
          f"{' '.join(g.id for g in args.groups)}; results appended to {args.results}.", flush=True)
    ok = [run_group(group, ctx, args, command, deadline) for group in args.groups]
    return 0 if all(ok) else 1
