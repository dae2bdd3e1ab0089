"""The seconds fairseq-train spends saving checkpoints, with the data loaders' workers kept
between epochs (fairseq's default) and without (this plugin's tasks' default).

    python -m benchmarks.checkpoint_stall [--epochs 4] [--repeats 3] [--num-workers 1]

Trains a tiny PageSum on a synthetic copy task with ``--num-workers`` data-loader workers
(fairseq's default is 1, which every recipe keeps) for ``--epochs`` epochs, saving a
checkpoint after each, and reads fairseq's own log line for each save ("Saved checkpoint
... (writing took S seconds)"). The two settings alternate, run after run, so that the
machine's load falls on both alike. A save of a tiny model takes a tenth of a second; when
the garbage collector frees an earlier epoch's loader during it, torch waits 5 seconds for
each of that loader's workers (see ``pagesum_plugin/tasks/one_dictionary.py``).
"""

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import markdown_table
from pagesum_plugin.checkpoints.builder import PLUGIN_DIR

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from builders.paged_data import write_copy_task  # noqa: E402  (the tests' synthetic corpus)

SAVE = re.compile(r"Saved checkpoint .*\(writing took ([\d.]+) seconds\)")
DONE = re.compile(r"done training in ([\d.]+) seconds")
SETTINGS = {"persistent workers (fairseq's default)": ["--persistent-workers"], "workers stopped every epoch": []}
FAIRSEQ_TRAIN = str(Path(sys.executable).parent / "fairseq-train")


def copy_task(directory: str) -> str:
    write_copy_task(directory, train=60, valid=10, test=5)
    return directory


def train(data: str, save_dir: str, epochs: int, workers: int, extra: list) -> tuple:
    """(seconds of every checkpoint save, seconds of the whole training) of one run."""
    command = [FAIRSEQ_TRAIN, data, "--user-dir", PLUGIN_DIR, "--task", "paged_summarization", "--arch", "pagesum_tiny",
               "--criterion", "paged_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--optimizer", "adam",
               "--lr", "3e-3", "--max-tokens", "1500", "--cpu", "--seed", "1", "--log-format", "simple",
               "--no-epoch-checkpoints", "--max-epoch", str(epochs), "--save-dir", save_dir,
               "--num-workers", str(workers), *extra]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    log = result.stdout + result.stderr
    return [float(s) for s in SAVE.findall(log)], float(DONE.search(log).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--threads", type=int, help="CPU threads of each training run (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # read by the fairseq-train runs
    print(f"CPU ({os.cpu_count()} cores, {platform.processor() or platform.machine()}); load average before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.epochs} epochs, --num-workers {args.num_workers}, "
          f"{args.repeats} runs per setting, alternating")
    runs = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory() as scratch:
        data = copy_task(os.path.join(scratch, "data"))
        for repeat in range(args.repeats):
            for name, extra in SETTINGS.items():
                save_dir = os.path.join(scratch, f"run{repeat}-{len(runs[name])}-{len(extra)}")
                runs[name].append(train(data, save_dir, args.epochs, args.num_workers, extra))
    rows = []
    for name, results in runs.items():
        saves = [s for run_saves, _ in results for s in run_saves]
        rows.append([name, len(saves), sum(s > 1.0 for s in saves), f"{max(saves):.2f}",
                     f"{statistics.median(sum(r) for r, _ in results):.2f}",
                     f"{statistics.median(total for _, total in results):.1f}"])
    print(markdown_table(["data loaders", "saves", "saves over 1 s", "longest save s", "median s saving per run",
                          "median s training per run"], rows))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
