"""BENCHMARKS.md's scale tables, rendered from the results file without running anything."""

from collections import defaultdict
from typing import Dict, List

from benchmarks.scale.hardware import Peaks
from benchmarks.scale.registry import ROWS
from benchmarks.scale.results import latest_runs, measurements_of


def setup_lines(runs: Dict[str, Dict]) -> List[str]:
    """One line per distinct command and machine: which groups it ran, when, and with what."""
    groups = defaultdict(list)
    for group, run in runs.items():
        key = (run["command"], run["machine"], run["cuda"], run["fairseq"], run["python"], run["model"], run["dtype"],
               Peaks(**run["peaks"]).describe(), run["time"][:10])
        groups[key].append(group)
    lines = []
    for (command, machine, cuda, fairseq, python, model, dtype, peaks, day), names in groups.items():
        cuda = f", CUDA {cuda}" if cuda else ""
        lines.append(f"Groups {', '.join(names)}: `{command}` ({day}). Machine: {machine}{cuda}, fairseq {fairseq}, "
                     f"Python {python}. Model: {model}, {dtype}. Peaks: {peaks}.")
    return lines


def report(records: List[Dict]) -> str:
    """Every row with a finished group: its setup lines, then each row's tables from its groups'
    latest finished runs, then the groups that were tried but never finished."""
    done, unfinished = latest_runs(records)
    runs = {run["run"]: run for run in done.values()}
    measurements = measurements_of(records, runs)
    sections = setup_lines(done) or ["No row group has finished yet."]
    for row in ROWS:
        sections += row.render([m for m in measurements if m["row"] == row.id], runs)
    if unfinished:
        sections.append("Not measured yet: " + "; ".join(
            f"group {group}: {run['status']}" + (f" ({run['error']})" if run.get("error") else "")
            for group, run in unfinished.items()) + ".")
    return "\n\n".join(sections)
