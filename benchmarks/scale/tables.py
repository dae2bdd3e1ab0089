"""How measurements read in a table: numbers, sizes, goals' verdicts."""

from typing import Optional

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
    """The cell of a configuration that did not run: OOM, or not tried after an OOM."""
    if record["status"] == "oom":
        return "OOM"
    return f"not tried (OOM at {' x '.join(map(str, record['stopped_at']))})"
