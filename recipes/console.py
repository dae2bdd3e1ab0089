"""Run one stage of a recipe quietly: its full output goes to a log file, the console
shows one progress bar and one closing line.

    pagesum-run-stage NAME LOG [--updates N] -- COMMAND [ARGS...]

The bar follows what the tool reports:

* a tqdm bar of its own (``12/25 [`` or ``37 examples``): the count it shows;
* fairseq-train's log lines: the update count, and the last validation loss as the
  bar's postfix; with ``--updates`` (fairseq's ``--max-update``), the bar fills with the
  updates done.

On failure the console gets the end of the log, from the last traceback when there is
one (otherwise its last 60 lines), and the path of the full log; the exit code is the
tool's own.
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

from tqdm import tqdm

TQDM_COUNT = re.compile(r"(\d+)/(\d+) \[")
TQDM_ITEMS = re.compile(r"(\d+) examples")
UPDATES = re.compile(r"num_updates[ =](\d+)")
VALID_LOSS = re.compile(r"valid on '\w+' subset \| loss ([\d.]+)")
FAILURE_TAIL_LINES = 60
ELAPSED_ONLY = "{desc}: {elapsed}{postfix}"  # until the tool reports a count
USAGE = "pagesum-run-stage NAME LOG [--updates N] -- COMMAND [ARGS...]"


def parse_args(argv):
    if "--" not in argv and not {"-h", "--help"} & set(argv):
        sys.exit(f"usage: {USAGE}")
    split = argv.index("--") if "--" in argv else len(argv)  # without "--": --help, which exits
    parser = argparse.ArgumentParser(prog="pagesum-run-stage", usage=USAGE, description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("name")
    parser.add_argument("log", type=Path)
    parser.add_argument("--updates", type=int, help="the updates the stage trains for: the bar shows those done")
    args = parser.parse_args(argv[:split])
    args.command = argv[split + 1:]
    if not args.command:
        parser.error("no command after --")
    return args


class StageBar:
    """One console bar for a stage, driven by the lines of its output."""

    def __init__(self, name: str, updates: int = None):
        self.updates = updates
        self.bar = tqdm(desc=name, total=updates, unit=" updates" if updates else " it", dynamic_ncols=True,
                        file=sys.stdout, leave=True, bar_format=None if updates else ELAPSED_ONLY,
                        # in a log file every redraw is a line more: at most one a minute there
                        mininterval=0.1 if sys.stdout.isatty() else 60)
        self.postfix = {}

    def read(self, line: str) -> None:
        if self.updates:
            if (match := UPDATES.search(line)) is not None:
                self.bar.n = min(int(match.group(1)), self.updates)
        elif (match := TQDM_COUNT.search(line)) is not None:
            self.bar.bar_format = None  # the tool counts: show the bar
            self.bar.total = int(match.group(2))
            self.bar.n = int(match.group(1))
        elif (match := TQDM_ITEMS.search(line)) is not None:
            self.bar.bar_format = "{desc}: {n_fmt} examples [{elapsed}]"
            self.bar.n = int(match.group(1))
        if (match := UPDATES.search(line)) is not None:
            self.postfix["updates"] = int(match.group(1))
        if (match := VALID_LOSS.search(line)) is not None:
            self.postfix["valid loss"] = float(match.group(1))
        if self.postfix:
            self.bar.set_postfix(self.postfix, refresh=False)
        self.bar.update(0)  # redraws no more often than mininterval (refresh() would at every line)

    def close(self, ok: bool) -> None:
        self.bar.close()


def lines_of(stream):
    """The stream's lines, split at newlines and at the carriage returns of progress bars."""
    pending = b""
    for chunk in iter(lambda: stream.read1(4096), b""):
        pending += chunk
        *complete, pending = re.split(rb"[\r\n]", pending)
        for line in complete:
            yield line.decode("utf-8", errors="replace")
    if pending:
        yield pending.decode("utf-8", errors="replace")


def failure_tail(log: Path) -> str:
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    first = starts[-1] if starts else max(0, len(lines) - FAILURE_TAIL_LINES)
    return "\n".join(lines[first:])


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    args.log.parent.mkdir(parents=True, exist_ok=True)
    bar = StageBar(args.name, args.updates)
    with args.log.open("w", encoding="utf-8") as log:
        log.write("$ " + " ".join(args.command) + "\n")
        process = subprocess.Popen(args.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for line in lines_of(process.stdout):
            if line.strip():
                log.write(line + "\n")
                bar.read(line)
        code = process.wait()
    bar.close(ok=code == 0)
    if code != 0:
        print(failure_tail(args.log), file=sys.stderr)
        print(f"{args.name} failed (exit code {code}); full log: {args.log}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
