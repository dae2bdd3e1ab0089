"""How measurements read in a table: numbers, sizes, goals' verdicts, captioned tables."""

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from benchmarks.common import markdown_table

GB = 1e9


def number(value: float) -> str:
    """Three significant digits, for values from a tiny CPU run to bart.large on a GPU."""
    return f"{value:.3g}"


def gigabytes(value: Optional[float]) -> str:
    """Bytes in GB (10^9), or "-" where the device keeps no such count (the CPU's reserve)."""
    return "-" if value is None else number(value / GB)


def verdict(ok: Optional[bool], device: str, missing: str = "") -> str:
    """Met or not; on the CPU, where the goals' scale is not reached, 'n/a' with the tiny run's
    result. ``ok`` None: a GPU peak was needed and is unknown (``missing`` names its option)."""
    if ok is None:
        return "n/a on CPU" if device == "cpu" else f"n/a (unknown peak: {missing})"
    word = "met" if ok else "not met"
    return word if device == "cuda" else f"n/a on CPU ({word} at this size)"


def not_run(record: dict) -> str:
    """The cell of a configuration that did not run: OOM, failed (with its error), or not tried
    after an OOM."""
    if record["status"] == "oom":
        return "OOM"
    if record["status"] == "failed":
        return f"failed ({record['error']})"
    return f"not tried (OOM at {' x '.join(map(str, record['stopped_at']))})"


def peak_text(value: Optional[float], unit: str, name: str) -> str:
    """A peak per second in 10^12 ``unit`` for a caption, or that ``name`` is unknown."""
    return f"{number(value / 1e12)} {unit}" if value else f"{name} (unknown here)"


def keyed(measurements: List[Dict], fields: Sequence[str],
          order: Optional[Callable[[Tuple], Tuple]] = None) -> Dict[Tuple, Dict]:
    """The measurements by the values of ``fields``, sorted by ``order`` of them (default: the
    values themselves); of two with the same values, the later."""
    found = {tuple(m[field] for field in fields): m for m in measurements}
    return dict(sorted(found.items(), key=lambda item: (order or (lambda key: key))(item[0])))


def section(caption: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A captioned markdown table, as the report prints each row."""
    return caption + "\n\n" + markdown_table(header, rows)


def first_run(measurements: List[Dict], runs: Dict[str, Dict]) -> Tuple[Dict, Dict]:
    """(run record, settings) of the run that made the first of ``measurements``: a caption's."""
    run = runs[measurements[0]["run"]]
    return run, run["settings"]
