"""The peak resident memory of a beam search on the CPU: this checkout's generator (the step
loop, and the fixed-shape steps) against another checkout's, in fresh processes.

A search at ``bart.base`` widths with random weights (``--pages`` pages of ``--page-len``
tokens, ``--batch`` documents, beam ``--beam``, summaries of exactly ``--tokens`` tokens) runs
in a process of its own, which reports its resident memory before the search and its peak
(``ru_maxrss``) after it: the search's increment is what decoding holds at its worst. With
``--before PATH`` (a checkout of another commit: ``git worktree add /tmp/before COMMIT``), the
same search runs with that checkout's code, the two taking turns for ``--repeats`` rounds; each
figure is the smallest over the rounds.

    python -m benchmarks.search_memory --before /tmp/before
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from benchmarks.common import markdown_table

REPO_ROOT = Path(__file__).resolve().parent.parent

# Run in the child, from the checkout under test (its own benchmarks and plugin on sys.path).
CHILD = r"""
import json, os, resource, sys, time
import torch
from benchmarks.beam_cache import BART_BASE
from benchmarks.common import build_model, paged_source
from benchmarks.generation_speed import net_input
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
settings = json.loads(sys.argv[1])
torch.set_num_threads(settings["threads"])
torch.manual_seed(0)
tokens = settings["tokens"]
task, model = build_model("pagesum_bart_large", BART_BASE, "--max-source-positions", str(settings["page_len"]),
                          "--max-target-positions", str(tokens + 4), dropout=0.0)
model.eval()
sample = net_input(paged_source(task.dictionary, settings["batch"], settings["pages"], settings["page_len"],
                                torch.Generator().manual_seed(0)), task.dictionary.pad())
options = dict(beam_size=settings["beam"], max_len_a=0, max_len_b=tokens, min_len=tokens)
if settings["decoding"]:
    options["decoding"] = settings["decoding"]
generator = PageSumSequenceGenerator([model], task.dictionary, **options)
resident = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
started = time.perf_counter()
with torch.no_grad():
    generator.generate([model], sample)
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"before": resident, "peak": peak, "seconds": seconds}))
"""


def search_in_child(checkout: Path, settings: Dict) -> Dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(settings)], cwd=checkout, env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="another checkout whose generator runs the same search")
    parser.add_argument("--pages", type=int, default=4)
    parser.add_argument("--page-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    settings = dict(pages=args.pages, page_len=args.page_len, batch=args.batch, beam=args.beam, tokens=args.tokens,
                    threads=args.threads)
    runs: Dict[str, Optional[Dict]] = {}
    plans: List[tuple] = [("this checkout, step loop", REPO_ROOT, "eager"),
                          ("this checkout, fixed shapes (op by op)", REPO_ROOT, "static")]
    if args.before is not None:
        commit = subprocess.run(["git", "-C", str(args.before), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or args.before.name
        plans.append((f"{commit} (before)", args.before, None))
    for _ in range(args.repeats):
        for name, checkout, decoding in plans:
            measured = search_in_child(checkout, {**settings, "decoding": decoding})
            best = runs.get(name)
            runs[name] = measured if best is None else {k: min(best[k], measured[k]) for k in measured}
    print(f"CPU, {args.threads} threads. A beam search at bart.base widths, random weights: {args.batch} documents "
          f"of {args.pages} pages x {args.page_len} tokens, beam {args.beam}, {args.tokens}-token summaries; each "
          f"in a fresh process, the smallest of {args.repeats} rounds taking turns. MB = 2^20 bytes.\n")
    rows = [[name, f"{m['before'] / 2**20:.0f}", f"{m['peak'] / 2**20:.0f}", f"{(m['peak'] - m['before']) / 2**20:.0f}",
             f"{m['seconds']:.1f}"] for name, m in runs.items()]
    print(markdown_table(["generator", "resident before MB", "peak MB", "search adds MB", "search s"], rows))


if __name__ == "__main__":
    main()
