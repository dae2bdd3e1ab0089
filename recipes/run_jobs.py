"""Runs a recipe's commands from a job file, with fairseq's imports paid once.

    pagesum-run-jobs JOBS.tsv [--parallel N] [--title TEXT]

Every line of JOBS.tsv is ``LOG<TAB>COMMAND``: COMMAND is a shell-quoted command line (a
console command such as ``fairseq-hydra-train``, ``fairseq-generate`` or ``pagesum-score``, or
``PYTHON -m MODULE ...``), optionally ending in ``> FILE``; LOG receives its output. An empty
line is a barrier: the commands between two barriers are independent and run up to
``--parallel`` at once; a group starts when the one before it has finished.

Importing torch and fairseq takes seconds, and a comparison runs dozens of commands, so this
process imports fairseq and its command modules once and runs every command in a child forked
from it, with the command line as ``sys.argv``: the same programs, with the same arguments and
output, as if typed in a shell (anything else does run in a shell). What the imports print
goes to JOBS.imports.log. It never imports the plugin itself: forking after the plugin's
import (it imports nltk) makes the data-loader workers of fairseq-train wait five seconds each
at shutdown.

A command's ``> FILE`` is written to a temporary name and moved into place only when the
command succeeds. The console shows a progress bar over the commands; the first failure
stops the run (commands already running finish) and prints the last lines of its log.
"""

import argparse
import importlib
import multiprocessing
import os
import runpy
import shlex
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from importlib.metadata import entry_points
from multiprocessing.connection import wait
from pathlib import Path
from typing import List, Optional

from tqdm import tqdm

TOOLKIT = "fairseq_cli.train"  # imported once, before forking: torch, fairseq, Hydra
PRELOADED = ("fairseq_cli.",)  # entry points whose modules are imported once too
TAIL_LINES = 25


@dataclass
class Job:
    log: Path
    argv: List[str]
    stdout: Optional[Path] = None  # "> FILE": the command's standard output

    @property
    def line(self) -> str:
        text = " ".join(shlex.quote(a) for a in self.argv)
        return f"{text} > {shlex.quote(str(self.stdout))}" if self.stdout else text


def read_jobs(path: Path) -> List[List[Job]]:
    """The job file as groups of independent jobs, in order."""
    groups: List[List[Job]] = [[]]
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            groups.append([])
            continue
        log, sep, command = line.partition("\t")
        argv = shlex.split(command)
        if not sep or not argv:
            raise SystemExit(f"pagesum-run-jobs: {path}:{number}: expected LOG<TAB>COMMAND")
        stdout = None
        if len(argv) >= 2 and argv[-2] == ">":
            stdout, argv = Path(argv[-1]), argv[:-2]
        groups[-1].append(Job(Path(log), argv, stdout))
    return [group for group in groups if group]


def console_scripts() -> dict:
    return {ep.name: ep for ep in entry_points(group="console_scripts")}


def preload(groups: List[List[Job]], scripts: dict, log: Path) -> None:
    """Import fairseq and the modules of its commands, once, in this process, when a job runs
    Python; what the imports print goes to ``log``, not to the console."""
    jobs = [job for group in groups for job in group]
    entries = [scripts.get(os.path.basename(job.argv[0])) for job in jobs]
    if not any(entries) and not any(job.argv[1:2] == ["-m"] for job in jobs):
        return  # shell commands only
    modules = [TOOLKIT] + [entry.module for entry in entries if entry and entry.value.startswith(PRELOADED)]
    console = os.dup(1), os.dup(2)
    with open(log, "w", encoding="utf-8") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            for module in dict.fromkeys(modules):
                importlib.import_module(module)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(console[0], 1)
            os.dup2(console[1], 2)


def execute(job: Job, scripts: dict) -> None:
    """Run in the forked child: the job's command, its output into its log."""
    job.log.parent.mkdir(parents=True, exist_ok=True)
    log = os.open(job.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 2)
    out = os.open(partial(job.stdout), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if job.stdout else log
    os.dup2(out, 1)
    argv = job.argv
    entry = scripts.get(os.path.basename(argv[0]))
    if entry is not None:
        sys.argv = argv
        result = entry.load()()
        sys.exit(result if isinstance(result, int) else 0)
    if len(argv) >= 3 and argv[1] == "-m":
        sys.argv = argv[2:]
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        sys.exit(0)
    sys.exit(subprocess.run(argv).returncode)


def partial(path: Path) -> str:
    return f"{path}.partial"


def tail(path: Path) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []
    return "\n".join("    " + line for line in lines[-TAIL_LINES:])


def run_group(group: List[Job], parallel: int, scripts: dict, bar: tqdm) -> Optional[Job]:
    """Run one group; the first job that failed, or None."""
    context = multiprocessing.get_context("fork")
    waiting, running, failed = deque(group), {}, None
    while waiting or running:
        while waiting and len(running) < parallel and failed is None:
            job = waiting.popleft()
            sys.stdout.flush()
            sys.stderr.flush()  # nothing buffered here may be written twice by a child
            process = context.Process(target=execute, args=(job, scripts))
            process.start()
            running[process.sentinel] = (process, job)
        if not running:
            break
        for sentinel in wait(list(running)):
            process, job = running.pop(sentinel)
            process.join()
            if process.exitcode == 0:
                if job.stdout:
                    os.replace(partial(job.stdout), job.stdout)
                bar.update(1)
            else:
                if job.stdout and os.path.exists(partial(job.stdout)):
                    os.remove(partial(job.stdout))
                failed = failed or job
                bar.write(f"pagesum-run-jobs: failed (exit {process.exitcode}): {job.line}\n  log {job.log}, last lines:\n"
                          f"{tail(job.log)}", file=sys.stderr)
    return failed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pagesum-run-jobs", description=__doc__.split("\n")[0])
    parser.add_argument("jobs", type=Path, help="the job file: LOG<TAB>COMMAND lines, empty lines between groups")
    parser.add_argument("--parallel", type=int, default=1, help="commands of one group run at once (default 1)")
    parser.add_argument("--title", default="jobs", help="the progress bar's label")
    args = parser.parse_args(argv)
    if args.parallel < 1:
        parser.error("--parallel must be at least 1")
    groups = read_jobs(args.jobs)
    scripts = console_scripts()
    preload(groups, scripts, args.jobs.with_suffix(".imports.log"))
    tqdm.monitor_interval = 0  # no monitor thread: this process forks
    with tqdm(total=sum(len(g) for g in groups), desc=args.title, unit="command", file=sys.stderr) as bar:
        for group in groups:
            bar.set_postfix_str(Path(group[0].log).parent.name)
            if run_group(group, args.parallel, scripts, bar) is not None:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
