"""Input errors that name the file, the line and the field."""

from dataclasses import dataclass

# Reasons, as counted in meta.json when ``--skip-invalid`` is given.
MALFORMED_JSON = "malformed_json"
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"
EMPTY_DOCUMENT = "empty_document"
EMPTY_SUMMARY = "empty_summary"
INVALID_UTF8 = "invalid_utf8"
EMPTY_BETWEEN_SEPARATORS = "empty_between_separators"
MISMATCHED_FILES = "mismatched_files"
CONFLICTING_FIELDS = "conflicting_fields"  # more than one of a format's alternative fields
DUPLICATE_ID = "duplicate_id"  # an id already given in the split
BLANK_LINE = "blank_line"  # not an error: counted, never an example


@dataclass
class InputError(Exception):
    """A bad example in an input file. ``line`` is 1-based; ``field`` may be None."""

    path: str
    line: int
    field: str | None
    reason: str
    detail: str

    def __str__(self) -> str:
        field = f", field '{self.field}'" if self.field else ""
        return f"{self.path}, line {self.line}{field}: {self.detail} [{self.reason}]"

    def __reduce__(self):
        # Picklable, so that worker processes can send it back.
        return (InputError, (self.path, self.line, self.field, self.reason, self.detail))


class BlankLine(InputError):
    """A blank line: no example. Never an error, but counted like a skipped example."""


class EmptyDocument(ValueError):
    """A document given in Python with no text to summarize, or a cluster with an empty source
    document."""


class MalformedDocument(ValueError):
    """A document given in Python that is none of the shapes ``readers.example_from_raw`` reads:
    a string, a list of ``(name, text)`` or ``{"name", "text"}`` sections, or a list of strings
    (a cluster)."""
