"""Files that a later step reads appear whole or not at all (``pagesum_plugin/atomic.py``)."""

import pytest

from pagesum_plugin.atomic import atomic_path, write_atomically


def test_the_file_appears_only_when_its_writing_is_complete(tmp_path):
    out = tmp_path / "report.json"
    with atomic_path(out) as partial:
        partial.write_text("{")
        assert not out.exists(), "a reader never sees a file being written"
        partial.write_text("{}")
    assert out.read_text() == "{}" and list(tmp_path.iterdir()) == [out]


def test_a_failed_write_leaves_neither_the_file_nor_a_partial_one(tmp_path):
    out = tmp_path / "figure.png"
    with pytest.raises(RuntimeError):
        with atomic_path(out) as partial:
            partial.write_bytes(b"\x89PNG half")
            raise RuntimeError("the plot failed")
    assert list(tmp_path.iterdir()) == []


def test_a_rewrite_replaces_the_old_file_whole(tmp_path):
    out = tmp_path / "summary.txt"
    write_atomically(out, "old\n")
    write_atomically(out, "new\n")
    assert out.read_text() == "new\n" and list(tmp_path.iterdir()) == [out]


def test_the_partial_name_keeps_the_suffix_that_writers_read_the_format_from(tmp_path):
    with atomic_path(tmp_path / "train.segments.length.npy") as partial:
        assert partial.name == "train.segments.length.partial.npy"
        partial.write_bytes(b"")
