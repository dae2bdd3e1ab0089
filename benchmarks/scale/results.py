"""The results file: JSON lines, appended by every call of the benchmark and read by
``--report``, so that a run split over several calls (or machines) renders as one.

Each group's run appends its measurement records (``type: "measurement"``: one configuration,
with ``row``, ``group``, ``system``, ``point`` and ``status``: ok, oom or not tried) and then
one run record (``type: "run"``: the group's settings, its estimate and time, the command, the
machine and the versions, and its status: done, failed or skipped), all in one write. The
report uses each group's latest finished run."""

import json
import os
import time
import uuid
from typing import Dict, List, Tuple


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:8]}"


def append(path: str, records: List[Dict]) -> None:
    """Appends ``records`` as one write, flushed to disk: a call killed later keeps them."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", encoding="utf-8") as results:
        results.write("".join(json.dumps(record) + "\n" for record in records))
        results.flush()
        os.fsync(results.fileno())


def read(path: str) -> List[Dict]:
    """Every record of the results file; a line that is not a JSON object stops with its line."""
    if not os.path.exists(path):
        raise SystemExit(f"{path}: no results file (run some row groups first, with --results {path})")
    records = []
    with open(path, encoding="utf-8") as results:
        for number, line in enumerate(results, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise SystemExit(f"{path}:{number}: not a JSON record ({error.msg})") from None
            if not isinstance(record, dict) or record.get("type") not in ("run", "measurement"):
                raise SystemExit(f"{path}:{number}: field 'type': expected 'run' or 'measurement'")
            records.append(record)
    return records


def latest_runs(records: List[Dict]) -> Tuple[Dict[str, Dict], Dict[str, Dict]]:
    """(group -> its latest run with status done, group -> its latest run for groups with none
    done: failed or skipped)."""
    done, other = {}, {}
    for record in records:
        if record["type"] == "run":
            (done if record["status"] == "done" else other)[record["group"]] = record
    return done, {group: run for group, run in other.items() if group not in done}


def measurements_of(records: List[Dict], runs: Dict[str, Dict]) -> List[Dict]:
    """The measurement records of ``runs`` (run id -> run record), in file order."""
    return [record for record in records if record["type"] == "measurement" and record["run"] in runs]
