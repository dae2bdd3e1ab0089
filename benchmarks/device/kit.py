"""The GPU kit: one command that, on a GPU machine with Python 3.12 and its own CUDA torch but
no package index, installs this project from the carried wheelhouse, runs the GPU-only tests
and then the benchmarks in the order of their value to the project, and leaves every log and
one JSON summary in one flat folder (``--out``, default ``$OUT``): the folder such a machine
hands back after a call.

One call of at most ``--budget`` seconds (default 9 minutes: a visit to the machine is 15,
its start and idle time included) runs ``PLAN`` in order:

1. install: ``pip install --no-index --no-deps --target SITE`` of the wheelhouse into the
   machine's own interpreter, with SITE first on ``PYTHONPATH``, never torch (the check that
   follows refuses a torch imported from SITE); skipped when SITE already holds the same
   wheels (a machine kept warm between calls). ``--wheelhouse-dry-run`` instead checks the
   wheelhouse lock and installs only the project's wheel: the rehearsal on a machine that
   has everything else.
2. tests: pytest on the GPU-only tests (``GPU_TESTS``), while the scale benchmark lists its
   groups and their estimates beside them.
3. the benchmarks: each row group of ``benchmarks.scale`` in its own process, told the time
   left, and the other benchmarks (``BENCHMARKS``: the causal self-attention, the one-page
   decoding table, AWESOME's captured segments). The groups append to ``--results``, which
   later calls append to as well; the other benchmarks' tables go to ``BENCHMARKS_FILE``.
4. report: ``benchmarks.scale --report`` of the results so far, and a copy of them.

Every step has an estimate (the scale groups' from ``benchmarks/scale/costs.py``, the others'
in ``STEP_SECONDS``, both calibrated on the first H100 visit); a step whose estimate exceeds
the time left is skipped and the next one is tried, so a cheap step is never lost to a dear
one before it. Each step runs in its own time box and is recorded in ``kit.json`` whatever
happens, none stopping the next; the log ends with every step's estimate against its real
time. ``--rows`` runs other groups instead of the plan's, ``--pending`` only the planned
groups without a finished run in ``--results``.

Only the standard library: it runs before anything is installed.

    OUT=/some/folder bash benchmarks/device/run.sh
"""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Dict, List, Optional, Tuple

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
GPU_TESTS = ("tests/test_cuda.py", "tests/test_cuda_transformers.py", "tests/test_cuda_equals_cpu.py",
             "tests/test_training_precision.py", "tests/test_half_precision_stress.py")
# What the call measures, most valuable first: the tests, then the scale groups (ids of
# ``benchmarks.scale --list``) and other benchmarks (``BENCHMARKS``) in the order the project needs
# their numbers. tests/test_device_kit.py checks that the plan names every GPU group once.
PLAN = ("tests", "3", "4:256", "causal", "one-page", "4:fused", "1", "4:900", "5:256", "6:arxiv", "2", "5:900",
        "6:govreport", "5:fidelity", "segments")
# Benchmarks other than the scale groups: name -> (module and options on CUDA, options added on the
# CPU rehearsal). Their tables go to one file, BENCHMARKS_FILE, each under a heading with its command.
BENCHMARKS = {"causal": (["benchmarks.causal_attention"], ["--quick"]),
              "one-page": (["benchmarks.fused_decoding", "--tables", "one-page", "--repeats", "3"], ["--quick"]),
              "segments": (["benchmarks.captured_segments", "--layers", "12", "--segments", "2", "4", "8"],
                           ["--layers", "2", "--segments", "3", "--repeats", "1"])}
BENCHMARKS_FILE = "benchmarks.md"
# Estimates of the steps other than the scale groups, in seconds on an H100 (the first visit: the
# install 2 s, the import check 16 s; the fifth: the GPU-only tests, 66 of them in 4 processes, 204 s, of
# which one test took 164 s, every scale group in turn: one test per group since, some 430 s of tests in all
# shared by the 4; the one-page table's four decoders, 3 rounds of about 2 s each, after building bart.large
# three times; the causal attention's table, not yet run there: one layer, three lengths, 6 rounds each,
# after torch's start; AWESOME's captured segments, not yet run there: bart.large built three times, 2, 4 and
# 8 segments of 1,024 tokens, each step eager and captured, three passes captured a model)
STEP_SECONDS = {"nvidia-smi": 2, "install": 10, "import check": 20, "tests": 130, "scale: list groups": 20,
                "causal": 30, "one-page": 90, "segments": 120, "report": 10}
OUTPUTS = ("kit.json", "kit.log", "tests.log", "scale.log", "scale.jsonl", "report.md",
           BENCHMARKS_FILE)  # all it writes
BUDGET_SECONDS = 540  # one call: 9 minutes of a 15-minute visit
RESERVE_SECONDS = 20  # kept back for the report and the copy of the results
# pytest-xdist processes for the tests on the GPU machine's 16 cores, sharing its GPU (the fourth visit
# ran them one at a time: 243 s, `--durations` now lists the slowest)
CUDA_TEST_WORKERS = 4
MIN_STEP_SECONDS = 15  # a step with less time than this left is skipped
# a benchmark step may take this many times its estimate, then it is stopped: one estimate far off (row
# 4:256 in the fifth visit, 51 s, cut off by the end of the call at 186 s) must not take the steps after it
OVERRUN = 2.5
CAPS = {"install": 240, "import check": 120, "tests": 300, "scale: list groups": 120}  # the longest each step may take


@dataclass
class Running:
    """A step started by ``Kit.start``: its record so far, and its process (None when skipped)."""
    entry: Dict
    log: str
    process: Optional[subprocess.Popen] = None
    files: Tuple[IO, ...] = ()
    started: float = 0.0
    timeout: float = 0.0


class Kit:
    """The steps' time boxes, logs and record."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.out = Path(args.out)
        self.scratch = Path(tempfile.mkdtemp(prefix="pagesum-kit-"))  # what the kit reads back, kept out of --out
        self.deadline = time.monotonic() + args.budget
        self.env = dict(os.environ, PYTHONUNBUFFERED="1",
                        PYTHONPATH=os.pathsep.join(filter(None, [args.site, os.environ.get("PYTHONPATH")])),
                        PATH=os.pathsep.join([str(Path(args.site) / "bin"), os.environ.get("PATH", "")]))
        self.record = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "budget_s": args.budget,
                       "argv": sys.argv[1:], "python": sys.executable, "steps": [], "environment": None}

    def time_left(self, cap: Optional[float] = None) -> float:
        left = self.deadline - time.monotonic() - RESERVE_SECONDS
        return left if cap is None else min(cap, left)

    def time_box(self, estimate: float) -> float:
        """A benchmark step's time box: ``OVERRUN`` times its estimate, at most the time left."""
        return self.time_left(max(OVERRUN * estimate, MIN_STEP_SECONDS))

    def log(self, name: str, text: str) -> None:
        with open(self.out / name, "a", encoding="utf-8") as log:
            log.write(text)

    def save(self) -> None:
        """kit.json, rewritten whole after every step (a kit cut off still leaves its record)."""
        self.record["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        partial = self.out / ".kit.json.partial"
        partial.write_text(json.dumps(self.record, indent=1) + "\n", encoding="utf-8")
        partial.replace(self.out / "kit.json")

    def step(self, name: str, command: List[str], log: str, timeout: float, stdout: Optional[Path] = None,
             estimate: Optional[float] = None) -> Dict:
        """Runs ``command`` from the repository root, its output appended to ``log`` (stdout to
        ``stdout`` if given), killed with its process group when ``timeout`` runs out; records
        and returns {name, status: passed | failed | timed out | skipped, rc, seconds, ...}.
        Skipped, not started, when less than ``MIN_STEP_SECONDS`` or than its ``estimate`` (by
        default ``STEP_SECONDS``) is left."""
        return self.wait(self.start(name, command, log, timeout, stdout, estimate))

    def start(self, name: str, command: List[str], log: str, timeout: float, stdout: Optional[Path] = None,
              estimate: Optional[float] = None) -> Running:
        """``step``'s first half: the step started (or skipped), for ``wait`` to finish, so that
        another step may run meanwhile."""
        estimate = STEP_SECONDS.get(name) if estimate is None else estimate
        entry = {"name": name, "command": shlex.join(command), "log": log, "time_box_s": round(timeout),
                 "estimate_s": None if estimate is None else round(estimate)}
        self.log(log, f"\n===== {name}: {entry['command']} (time box {timeout:.0f} s, estimate "
                      f"{entry['estimate_s']} s)\n")
        if timeout < max(MIN_STEP_SECONDS, estimate or 0):
            entry.update(status="skipped", rc=None, seconds=0.0,
                         note=f"{max(timeout, 0):.0f} s left, estimate {entry['estimate_s']} s")
            return Running(entry, log)
        output = open(self.out / log, "a", encoding="utf-8")
        result = open(stdout, "w", encoding="utf-8") if stdout else output
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=self.env, stdout=result, stderr=output,
                                   start_new_session=True)
        return Running(entry, log, process, (output, result), time.monotonic(), timeout)

    def wait(self, running: Running) -> Dict:
        """``step``'s second half: waits for the step until its time box ends, then records it."""
        entry = running.entry
        if running.process is not None:
            try:
                rc = running.process.wait(timeout=max(running.started + running.timeout - time.monotonic(), 0))
                entry.update(status="passed" if rc == 0 else "failed", rc=rc)
            except subprocess.TimeoutExpired:
                os.killpg(running.process.pid, signal.SIGKILL)  # the step's own process group
                running.process.wait()
                entry.update(status="timed out", rc=None)
            for file in set(running.files):
                file.close()
            entry["seconds"] = round(time.monotonic() - running.started, 1)
        return self.finish(entry, running.log)

    def finish(self, entry: Dict, log: str) -> Dict:
        self.log(log, f"===== {entry['name']}: {entry['status']} ({entry['seconds']} s)\n")
        self.record["steps"].append(entry)
        self.save()
        return entry


# ---- the steps ----------------------------------------------------------------------------------


def read_back(path: Path) -> str:
    """What a step printed to ``path``; empty if it never started."""
    return path.read_text(encoding="utf-8") if path.exists() else ""


def wheels_of(folder: Path) -> List[Path]:
    return sorted(folder.glob("*.whl"))


def install(kit: Kit) -> None:
    args = kit.args
    wheelhouse = Path(args.wheelhouse)
    if args.wheelhouse_dry_run:
        wheelhouse = kit.scratch / "wheelhouse"
        kit.step("wheelhouse (dry run)", [sys.executable, "-m", "benchmarks.device.wheelhouse", "--dry-run",
                                          "--dest", str(wheelhouse)], "kit.log", kit.time_left(CAPS["install"]))
    wheels = wheels_of(wheelhouse)
    stamp = Path(args.site) / ".kit-wheelhouse.json"
    contents = [[wheel.name, wheel.stat().st_size] for wheel in wheels]
    if not wheels:
        kit.finish({"name": "install", "status": "failed", "rc": None, "seconds": 0.0,
                    "note": f"no wheels in {wheelhouse}: build them with python -m benchmarks.device.wheelhouse"},
                   "kit.log")
    elif stamp.exists() and json.loads(stamp.read_text()) == contents:
        kit.finish({"name": "install", "status": "passed", "rc": 0, "seconds": 0.0,
                    "note": f"{args.site} already holds these {len(wheels)} wheels"}, "kit.log")
    else:
        entry = kit.step("install", [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                                     "--no-cache-dir", "--upgrade", "--disable-pip-version-check", "--target",
                                     args.site, *map(str, wheels)], "kit.log", kit.time_left(CAPS["install"]))
        if entry["status"] == "passed":
            stamp.write_text(json.dumps(contents))
    environment = import_check(kit)
    carried = carried_files(Path(args.site), "transformers")
    if environment and environment.get("transformers_error") and carried:
        for path in carried:
            shutil.rmtree(path)
        kit.log("kit.log", f"the carried transformers does not import here ({environment['transformers_error']}): "
                           f"removed from {args.site}, the machine's own is used\n")
        import_check(kit)


def import_check(kit: Kit) -> Optional[Dict]:
    """``benchmarks.device.check``: the versions the steps will run, recorded as the environment."""
    check = kit.step("import check", [sys.executable, "-m", "benchmarks.device.check", kit.args.site], "kit.log",
                     kit.time_left(CAPS["import check"]), stdout=kit.scratch / "check.out")
    printed = read_back(kit.scratch / "check.out").strip().splitlines()
    kit.log("kit.log", "\n".join(printed) + "\n")
    if check["status"] != "passed" or not printed:
        return None
    kit.record["environment"] = json.loads(printed[-1])
    kit.save()
    return kit.record["environment"]


def carried_files(site: Path, package: str) -> List[Path]:
    """What the wheelhouse installed of ``package`` in ``site``: its folder and its metadata."""
    return sorted(path for path in (site / package, *site.glob(f"{package}-*.dist-info")) if path.is_dir())


def run_tests(kit: Kit) -> None:
    workers = ["-n", str(kit.args.test_workers), "--dist", "load"] if kit.args.test_workers else []
    entry = kit.step("tests", [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *workers,
                               "--durations", "15", *kit.args.tests], "tests.log", kit.time_left(CAPS["tests"]))
    summary = re.findall(r"^=*\s*(\d+ (?:passed|failed|skipped|errors?|deselected)\b.*?)\s*=*$",
                         read_back(kit.out / "tests.log"), re.MULTILINE)
    if summary:
        entry["note"] = summary[-1]
        kit.save()


def scale_options(args: argparse.Namespace) -> List[str]:
    options = ["--device", args.device, "--results", args.results]
    if args.quick:
        options.append("--quick")
    if args.threads:
        options += ["--threads", str(args.threads)]
    return options


def group_statuses(path: Path) -> Dict[str, str]:
    """group -> the status of its latest run in the results file (done, failed or skipped)."""
    if not path.exists():
        return {}
    statuses = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the report step stops at it, naming its line
            continue
        if isinstance(record, dict) and record.get("type") == "run":
            statuses[record["group"]] = "done" if "done" in (record["status"], statuses.get(record["group"])) \
                else record["status"]
    return statuses


def start_listing(kit: Kit) -> Running:
    """``benchmarks.scale --list`` started: the scale groups the call may run (those of the plan,
    or of ``--rows``), in the scale benchmark's order, with their estimates. It runs beside the
    tests: it only imports and reckons, and the tests do not wait for it."""
    args = kit.args
    name = "scale: list groups"
    return kit.start(name, [sys.executable, "-m", "benchmarks.scale", *scale_options(args), "--list",
                            *(["--rows", *args.rows] if args.rows else [])], "scale.log", kit.time_left(CAPS[name]),
                     stdout=kit.scratch / "groups")


def listed_groups(kit: Kit, listing: Running) -> Dict[str, float]:
    """The groups ``start_listing`` printed, once it is done: {group: estimated seconds}."""
    if kit.wait(listing)["status"] != "passed":
        return {}
    printed = read_back(kit.scratch / "groups")
    return {group: float(seconds) for group, seconds in (line.split() for line in printed.splitlines())}


def run_group(kit: Kit, group: str, estimate: float) -> None:
    time_box = kit.time_box(estimate)
    entry = kit.step(f"scale {group}", [sys.executable, "-m", "benchmarks.scale", *scale_options(kit.args), "--rows",
                                        group, "--time-left", f"{max(time_box, 0):.0f}"], "scale.log", time_box,
                     estimate=estimate)
    if entry["status"] == "passed" and group_statuses(Path(kit.args.results)).get(group) == "skipped":
        entry["status"] = "skipped"
        entry["note"] = "its estimate exceeded the time left"
        kit.save()


def run_benchmark(kit: Kit, name: str) -> None:
    """A benchmark of ``BENCHMARKS``, its tables appended to ``BENCHMARKS_FILE`` under a heading."""
    module, on_the_cpu = BENCHMARKS[name]
    options = ["--device", kit.args.device] + (on_the_cpu if kit.args.device == "cpu" or kit.args.quick else [])
    if kit.args.threads:
        options += ["--threads", str(kit.args.threads)]
    command = [sys.executable, "-m", *module, *options]
    tables = kit.scratch / f"{name}.md"
    entry = kit.step(name, command, "scale.log", kit.time_box(STEP_SECONDS[name]), stdout=tables)
    kit.log(BENCHMARKS_FILE, f"## {name}: {entry['status']} ({entry['seconds']} s)\n\n"
                             f"`python {shlex.join(command[1:])}`\n\n{read_back(tables)}\n")


def run_plan(kit: Kit) -> None:
    """The tests (the scale groups listed meanwhile), then every planned benchmark in order, each
    skipped whose estimate exceeds the time left (the next still tried)."""
    args = kit.args
    listing = start_listing(kit)
    if args.tests:
        run_tests(kit)
    estimates = listed_groups(kit, listing)
    unplanned = [group for group in estimates if group not in PLAN]  # other sizes (--quick): after the plan's
    groups = list(estimates) if args.rows else [step for step in PLAN if step in estimates] + unplanned
    if args.pending:
        done = {group for group, status in group_statuses(Path(args.results)).items() if status == "done"}
        groups = [group for group in groups if group not in done]
    kit.record["groups"] = groups
    steps = groups if args.rows or args.pending else \
        [step for step in PLAN if step in groups or step in BENCHMARKS] + unplanned
    for step in steps:
        if step in BENCHMARKS:
            run_benchmark(kit, step)
        else:
            run_group(kit, step, estimates[step])


def report(kit: Kit) -> None:
    results = Path(kit.args.results)
    if not results.exists():
        kit.finish({"name": "report", "status": "skipped", "rc": None, "seconds": 0.0, "note": "no results yet"},
                   "scale.log")
        return
    shutil.copyfile(results, kit.out / "scale.jsonl")
    kit.step("report", [sys.executable, "-m", "benchmarks.scale", "--report", "--results", str(results)], "scale.log",
             max(kit.time_left() + RESERVE_SECONDS - 5, MIN_STEP_SECONDS), stdout=kit.out / "report.md", estimate=0)
    kit.record["group_status"] = group_statuses(results)
    kit.save()


def estimates_table(steps: List[Dict]) -> str:
    """Every step's estimate against its real time: how ``STEP_SECONDS`` and the scale
    benchmark's costs held up, for the next calibration."""
    lines = ["| step | status | estimate s | real s | real / estimate |", "|---|---|---:|---:|---:|"]
    for step in steps:
        estimate, seconds = step.get("estimate_s"), step["seconds"]
        ratio = f"{seconds / estimate:.2f}" if estimate and step["status"] != "skipped" else "-"
        lines.append(f"| {step['name']} | {step['status']} | {'-' if estimate is None else estimate} | "
                     f"{seconds:.0f} | {ratio} |")
    return "\n".join(lines) + "\n"


# ---- the command ---------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bash benchmarks/device/run.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT"), help="the folder for the logs and results "
                        "(default: $OUT)")
    parser.add_argument("--rows", nargs="+", help="scale row groups to run instead of the plan's (benchmarks.scale "
                        "--rows), with no other benchmark")
    parser.add_argument("--pending", action="store_true", help="only the scale groups (of the plan, or of --rows) "
                        "without a finished run in --results")
    parser.add_argument("--tests", nargs="*", help=f"test files to run (default: {' '.join(GPU_TESTS)}; none: "
                        "--tests with no file)")
    parser.add_argument("--wheelhouse", default=".wheelhouse", help="the carried wheels (default: .wheelhouse)")
    parser.add_argument("--wheelhouse-dry-run", action="store_true", help="check the wheelhouse instead of using one "
                        "and install only the project's wheel (a rehearsal where everything else is installed)")
    parser.add_argument("--site", default=os.path.join(tempfile.gettempdir(), "pagesum-site"),
                        help="where the wheels are installed, first on PYTHONPATH")
    parser.add_argument("--results", default="runs/device/scale.jsonl", help="the results file the groups append to")
    parser.add_argument("--budget", type=float, default=BUDGET_SECONDS, help="seconds the whole command may take")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true", help="the scale benchmark's smoke sizes")
    parser.add_argument("--threads", type=int, help="CPU threads for torch")
    parser.add_argument("--test-workers", type=int, help="pytest-xdist workers for the tests, sharing the GPU "
                        f"(default: {CUDA_TEST_WORKERS} on CUDA, none on the CPU)")
    args = parser.parse_args(argv)
    if args.test_workers is None:
        args.test_workers = CUDA_TEST_WORKERS if args.device == "cuda" else 0
    if not args.out:
        parser.error("--out (or $OUT): where the logs and results go")
    if args.tests is None:
        args.tests = list(GPU_TESTS)
    args.site = os.path.abspath(args.site)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    kit = Kit(args)
    kit.out.mkdir(parents=True, exist_ok=True)
    kit.log("kit.log", f"GPU kit: {shlex.join(sys.argv)}\n")
    if shutil.which("nvidia-smi"):
        kit.step("nvidia-smi", ["nvidia-smi"], "kit.log", kit.time_left(30))
    for phase in (install, run_plan, report):
        try:
            phase(kit)
        except Exception as error:  # the kit's own failure in one phase must not cost the later ones
            kit.finish({"name": phase.__name__, "status": "failed", "rc": None, "seconds": 0.0,
                        "note": f"{type(error).__name__}: {error}"}, "kit.log")
    shutil.rmtree(kit.scratch)
    kit.log("kit.log", "\nEvery step's estimate against its real time:\n\n" + estimates_table(kit.record["steps"]))
    bad = [step["name"] for step in kit.record["steps"] if step["status"] in ("failed", "timed out")]
    kit.log("kit.log", f"GPU kit: {'steps that did not pass: ' + ', '.join(bad) if bad else 'every step passed'}; "
                       f"files in {kit.out}: {', '.join(sorted(p.name for p in kit.out.iterdir()))}\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
