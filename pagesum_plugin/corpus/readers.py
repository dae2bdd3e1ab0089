"""Readers of the native dataset formats.

Every format is read in two steps, so that the costly one runs in worker processes:

1. ``iter_records(path, input_format)`` yields cheap ``Record``\\ s (raw bytes and where they
   came from) in file order;
2. ``parse_record(record, input_format)`` decodes and validates one record into an
   ``Example``, raising ``InputError`` (file, line, field) on bad input.

``read_examples`` chains both for simple callers. An id given twice in one split is refused
(``ExampleIds``), by ``read_examples`` and by ``pagesum-preprocess``, which checks in input order.
"""

import codecs
import json
import re
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pagesum_plugin.corpus import errors
from pagesum_plugin.corpus.errors import BlankLine, InputError
from pagesum_plugin.corpus.options import INPUT_FORMATS
from pagesum_plugin.corpus.sentences import split_sentences

MULTINEWS_SEPARATOR = "story_separator_special_tag"
PLACEHOLDER_PAGE = "."  # the authors' filler for a missing page

# What a reader may assume, counted by name in the statistics.
ASSUMED_NUMERIC_ID = "numeric_id_read_as_text"
ASSUMED_UNNAMED_SECTION = "section_without_name"
ASSUMED_EMPTY_CLUSTER = "empty_cluster_as_placeholder_page"
MULTINEWS_JSON_SEPARATOR = "|||||"

JSONL_DOCUMENT_FIELDS = ("sections", "documents", "text")  # an example gives exactly one
COHAN_ID = "article_id"  # the field arXiv's and PubMed's ids are read from
ACLSUM_ID = "paper_id"  # aclsum's, in JSON lines (a .json file's id is its name)
ID_FIELDS = {"arxiv": COHAN_ID, "pubmed": COHAN_ID, "aclsum": ACLSUM_ID}  # by format; the others': "id"


@dataclass(frozen=True)
class Unit:
    """A discourse unit: a section, a source document of a cluster, or a paragraph.

    ``sentences`` holds the dataset's own segmentation when it has one; otherwise the
    offline splitter segments ``text`` on demand.
    """

    text: str
    name: str = ""
    sentences: tuple[str, ...] | None = None

    def sentence_list(self) -> list[str]:
        if self.sentences is not None:
            return list(self.sentences)
        return split_sentences(self.text)


@dataclass
class Example:
    """One summarization example. ``kind`` says what the units are; ``assumed`` names what
    the reader had to assume about the input (counted in the statistics)."""

    id: str
    summary: str
    units: list[Unit] = field(default_factory=list)
    kind: str = "text"  # "sections" | "documents" | "text" (paragraphs of a plain document)
    assumed: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return "\n\n".join(unit.text for unit in self.units)


@dataclass(frozen=True)
class Record:
    """Raw, undecoded input for one example. ``payload`` is bytes, a tuple of bytes, or
    None for a blank line (no example, but counted)."""

    path: str
    line: int
    payload: Any


# --------------------------------------------------------------------------- records


def iter_records(path: str | Path, input_format: str) -> Iterator[Record]:
    """Yield the raw records of one split file (or folder, for ``aclsum``) in order."""
    _check_format(input_format)
    path = Path(path)
    if input_format == "multinews" and not _is_json_lines(path):
        yield from _iter_paired_lines(path, multinews_target_path(path))
    elif input_format == "aclsum" and path.is_dir():
        for json_file in sorted(path.glob("*.json")):
            yield Record(str(json_file), 1, json_file.read_bytes())
    elif input_format == "aclsum" and path.suffix == ".json":
        yield Record(str(path), 1, path.read_bytes())
    else:
        yield from _iter_lines(path)


def _iter_lines(path: Path) -> Iterator[Record]:
    with open(path, "rb") as lines:
        for number, line in enumerate(lines, start=1):
            if number == 1 and line.startswith(codecs.BOM_UTF8):
                line = line[len(codecs.BOM_UTF8):]  # a byte-order mark is not content
            yield Record(str(path), number, line if line.strip() else None)


def _iter_paired_lines(source: Path, target: Path) -> Iterator[Record]:
    with open(source, "rb") as sources, open(target, "rb") as targets:
        for number, (src, tgt) in enumerate(zip_longest(sources, targets), start=1):
            if src is None or tgt is None:
                shorter = source if src is None else target
                raise InputError(
                    str(source), number, None, errors.MISMATCHED_FILES,
                    f"{source.name} and {target.name} have different numbers of lines ({shorter.name} ends "
                    f"at line {number - 1}); which lines pair up is unknown, so this cannot be skipped",
                )
            yield Record(str(source), number, (src, tgt))


def multinews_target_path(source: Path) -> Path:
    name = source.name
    if ".src" not in name:
        raise ValueError(f"{source}: a Multi-News source file must have '.src' in its name")
    head, _, tail = name.rpartition(".src")
    return source.with_name(head + ".tgt" + tail)


def _is_json_lines(path: Path) -> bool:
    return path.suffix in (".jsonl", ".json")


def _check_format(input_format: str) -> None:
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"unknown input format {input_format!r}; choose from {INPUT_FORMATS}")


# --------------------------------------------------------------------------- parsing


def read_examples(path: str | Path, input_format: str) -> Iterator[Example]:
    """Yield the examples of one split, raising ``InputError`` at the first bad one."""
    ids = ExampleIds(input_format)
    for record in iter_records(path, input_format):
        if record.payload is not None:
            example = parse_record(record, input_format)
            ids.add(example.id, record.path, record.line)
            yield example


class ExampleIds:
    """The ids of one split, each where it was first given: page weights and outputs are keyed
    by id, so an id given twice is an error (the later example is the one refused or skipped)."""

    def __init__(self, input_format: str):
        self.field = ID_FIELDS.get(input_format, "id")
        self.first: dict[str, tuple[str, int]] = {}

    def add(self, example_id: str, path: str, line: int) -> None:
        first = self.first.setdefault(example_id, (path, line))
        if first != (path, line):
            where = f"line {first[1]}" if first[0] == path else f"{first[0]}, line {first[1]}"
            raise InputError(path, line, self.field, errors.DUPLICATE_ID,
                             f"example id {example_id!r} is already given on {where}")


def parse_record(record: Record, input_format: str) -> Example:
    """Decode and validate one record; a blank line raises ``BlankLine``."""
    _check_format(input_format)
    if record.payload is None:
        raise BlankLine(record.path, record.line, None, errors.BLANK_LINE, "blank line")
    if input_format == "multinews" and isinstance(record.payload, tuple):
        return _parse_multinews_src_tgt(record)
    obj = _Fields(record, _load_json(record, record.payload))
    return _PARSERS[input_format](obj)


def _decode(record: Record, data: bytes, field_name: str | None = None) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(
            record.path, record.line, field_name, errors.INVALID_UTF8,
            f"invalid UTF-8 at byte {error.start}",
        ) from None


def _load_json(record: Record, data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(
            record.path, record.line, _field_with_bad_bytes(data), errors.INVALID_UTF8,
            f"invalid UTF-8 at byte {error.start}",
        ) from None
    text = text.rstrip("\r\n")  # without its line break, the parser's position is on the record's lines
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        end = ", the end of the line" if error.pos >= len(text) else ""
        raise InputError(
            record.path, record.line + error.lineno - 1, None, errors.MALFORMED_JSON,
            f"malformed JSON: {error.msg} at column {error.colno}{end}",
        ) from None


def _field_with_bad_bytes(data: bytes) -> str | None:
    """Name the JSON field whose string holds the invalid bytes, when the JSON parses."""
    try:
        obj = json.loads(data.decode("utf-8", errors="surrogateescape"))
    except json.JSONDecodeError:
        return None

    def search(value: Any, where: str) -> str | None:
        if isinstance(value, str):
            return where if re.search("[\udc80-\udcff]", value) else None
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for key, item in items:
            path = f"{where}.{key}" if isinstance(key, str) else f"{where}[{key}]"
            found = search(item, path.lstrip("."))
            if found:
                return found
        return None

    return search(obj, "")


class _Fields:
    """Typed access to the fields of one JSON object, with errors that name the field."""

    def __init__(self, record: Record, obj: Any):
        self.record = record
        if not isinstance(obj, dict):
            self.fail(None, errors.WRONG_TYPE, f"expected a JSON object, got {type(obj).__name__}")
        self.obj = obj
        self.assumed: list[str] = []

    def fail(self, name: str | None, reason: str, detail: str):
        raise InputError(self.record.path, self.record.line, name, reason, detail)

    def has(self, name: str) -> bool:
        return name in self.obj

    def get(self, name: str, kind: type | tuple, container: dict | None = None, where: str | None = None):
        container = self.obj if container is None else container
        where = where or name
        if name not in container:
            self.fail(where, errors.MISSING_FIELD, "missing field")
        return self.check(container[name], kind, where)

    def check(self, value: Any, kind: type | tuple, where: str):
        if not isinstance(value, kind) or isinstance(value, bool):
            expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            self.fail(where, errors.WRONG_TYPE, f"expected {expected}, got {type(value).__name__}")
        return value

    def strings(self, value: Any, where: str) -> list[str]:
        self.check(value, list, where)
        return [self.check(item, str, f"{where}[{i}]") for i, item in enumerate(value)]

    def summary(self, text: str, where: str) -> str:
        if not text.strip():
            self.fail(where, errors.EMPTY_SUMMARY, "empty summary")
        return text.strip()

    def example(self, example_id: str, summary: str, units: list[Unit], kind: str, where: str) -> Example:
        if not example_id.strip() or any(c in example_id for c in "\r\n"):
            self.fail(None, errors.WRONG_TYPE, f"example id {example_id!r} is empty or spans lines")
        units = [unit for unit in units if unit.text.strip()]
        if not units:
            self.fail(where, errors.EMPTY_DOCUMENT, "empty document")
        return Example(example_id, summary, units, kind, tuple(self.assumed))

    def example_id(self, name: str = "id") -> str:
        """A string id; a number is taken as its decimal text, and that is recorded."""
        value = self.get(name, (str, int))
        if isinstance(value, int):
            self.assumed.append(ASSUMED_NUMERIC_ID)
            return str(value)
        return value

    @property
    def default_id(self) -> str:
        return f"{Path(self.record.path).stem}-{self.record.line}"


def _parse_jsonl(obj: _Fields) -> Example:
    example_id = obj.example_id()
    summary = obj.summary(obj.get("summary", str), "summary")
    given = [name for name in JSONL_DOCUMENT_FIELDS if obj.has(name)]
    if len(given) > 1:
        named = ", ".join(repr(name) for name in given[:-1]) + f" and {given[-1]!r}"
        obj.fail(given[1], errors.CONFLICTING_FIELDS, f"{named} are {'both' if len(given) == 2 else 'all'} given; "
                 f"an example gives exactly one of 'sections', 'documents' or 'text'")
    if obj.has("sections"):
        sections = obj.get("sections", list)
        units = []
        for i, section in enumerate(sections):
            where = f"sections[{i}]"
            obj.check(section, dict, where)
            if "name" in section:
                name = obj.get("name", str, section, f"{where}.name")
            else:
                name = ""
                obj.assumed.append(ASSUMED_UNNAMED_SECTION)
            text = obj.get("text", str, section, f"{where}.text")
            if not text.strip():
                obj.fail(f"{where}.text", errors.EMPTY_DOCUMENT, f"section {i} is empty")
            units.append(Unit(text.strip(), name.strip()))
        return obj.example(example_id, summary, units, "sections", "sections")
    if obj.has("documents"):
        documents = obj.strings(obj.get("documents", list), "documents")
        return _documents_example(obj, example_id, summary, documents, "documents")
    if obj.has("text"):
        return obj.example(example_id, summary, [Unit(obj.get("text", str).strip())], "text", "text")
    obj.fail("sections", errors.MISSING_FIELD, "one of 'sections', 'documents' or 'text' is required")


def _documents_example(obj: _Fields, example_id: str, summary: str, documents: list[str], where: str) -> Example:
    """Every document of a cluster must have text: an empty one is a broken separator."""
    for i, document in enumerate(documents):
        if not document.strip():
            obj.fail(f"{where}[{i}]", errors.EMPTY_DOCUMENT, f"document {i} of the cluster is empty")
    return obj.example(example_id, summary, [Unit(d.strip()) for d in documents], "documents", where)


_SENTENCE_TAGS = re.compile(r"</?S>")


def _parse_cohan(obj: _Fields) -> Example:
    """arXiv / PubMed release of Cohan et al. (2018): pre-split sentences, sections."""
    example_id = obj.get(COHAN_ID, str)
    abstract = obj.strings(obj.get("abstract_text", list), "abstract_text")
    summary = obj.summary(" ".join(_SENTENCE_TAGS.sub("", s).strip() for s in abstract).strip(), "abstract_text")
    article = obj.strings(obj.get("article_text", list), "article_text")
    names = obj.strings(obj.get("section_names", list), "section_names")
    sections = obj.get("sections", list)
    if len(names) != len(sections):
        obj.fail("sections", errors.WRONG_TYPE, f"{len(sections)} sections but {len(names)} section_names")
    units = []
    for i, (name, sentences) in enumerate(zip(names, sections)):
        sentences = [s.strip() for s in obj.strings(sentences, f"sections[{i}]") if s.strip()]
        units.append(Unit(" ".join(sentences), name.strip(), tuple(sentences)))
    if not any(unit.text for unit in units):
        # Some articles have no section structure: the whole article is one unit.
        sentences = tuple(s.strip() for s in article if s.strip())
        units = [Unit(" ".join(sentences), "", sentences)]
    return obj.example(example_id, summary, units, "sections", "article_text")


def _parse_govreport(obj: _Fields) -> Example:
    if not obj.has("document_sections"):
        return _parse_govreport_plain(obj)
    example_id = obj.example_id()
    summary_sections = obj.get("summary_sections", dict)
    summary_paragraphs = obj.strings(obj.get("paragraphs", list, summary_sections, "summary_sections.paragraphs"),
                                     "summary_sections.paragraphs")
    summary = obj.summary("\n".join(summary_paragraphs), "summary_sections.paragraphs")
    sections = obj.get("document_sections", dict)
    lists = {}
    for name in ("title", "paragraphs", "depth"):
        where = f"document_sections.{name}"
        lists[name] = obj.get(name, list, sections, where)
        if len(lists[name]) != len(lists["title"]):
            obj.fail(where, errors.WRONG_TYPE, f"has {len(lists[name])} entries, title has {len(lists['title'])}")
    titles = obj.strings(lists["title"], "document_sections.title")
    paragraphs = obj.strings(lists["paragraphs"], "document_sections.paragraphs")
    depths = [obj.check(d, int, f"document_sections.depth[{i}]") for i, d in enumerate(lists["depth"])]
    return obj.example(example_id, summary, _fold_subsections(titles, paragraphs, depths), "sections",
                       "document_sections.paragraphs")


def _fold_subsections(titles: list[str], paragraphs: list[str], depths: list[int]) -> list[Unit]:
    """Top-level sections become units; deeper subsections join their parent's text."""
    top = min(depths, default=0)
    units: list[tuple[str, list[str]]] = []
    for title, text, depth in zip(titles, paragraphs, depths):
        lines = [line.strip() for line in text.split("\n") if line.strip()]
        if depth == top or not units:
            units.append((title.strip(), lines))
        else:
            units[-1][1].extend(([title.strip()] if title.strip() else []) + lines)
    return [Unit("\n".join(lines), name) for name, lines in units]


def _parse_govreport_plain(obj: _Fields) -> Example:
    example_id = obj.example_id()
    summary = obj.summary(obj.get("summary", str), "summary")
    paragraphs = [p.strip() for p in obj.get("document", str).split("\n") if p.strip()]
    return obj.example(example_id, summary, [Unit(p) for p in paragraphs], "text", "document")


def _split_cluster(obj: _Fields, text: str, separator: str, where: str) -> list[str]:
    """Split a cluster on its separator. Leading/trailing separators are tolerated;
    two separators with nothing between them are an error."""
    documents = text.split(separator)
    while documents and not documents[-1].strip():
        documents.pop()
    while documents and not documents[0].strip():
        documents.pop(0)
    for i, document in enumerate(documents):
        if not document.strip():
            obj.fail(where, errors.EMPTY_BETWEEN_SEPARATORS,
                     f"nothing between separators {i} and {i + 1} ({separator!r})")
    return documents


def _cluster_or_placeholder(obj: _Fields, documents: list[str]) -> list[str]:
    """The Multi-News release has clusters with no documents. Every example is kept, as
    the authors kept it: an empty cluster becomes one placeholder page, and is counted."""
    if documents:
        return documents
    obj.assumed.append(ASSUMED_EMPTY_CLUSTER)
    return [PLACEHOLDER_PAGE]


def _parse_multinews_json(obj: _Fields) -> Example:
    example_id = obj.example_id() if obj.has("id") else obj.default_id
    summary = obj.summary(obj.get("summary", str), "summary")
    documents = _split_cluster(obj, obj.get("document", str), MULTINEWS_JSON_SEPARATOR, "document")
    return _documents_example(obj, example_id, summary, _cluster_or_placeholder(obj, documents), "document")


def _parse_multinews_src_tgt(record: Record) -> Example:
    source, target = record.payload
    obj = _Fields(record, {})
    target_where = "tgt"
    source_text = _decode(record, source, "src").replace("NEWLINE_CHAR", "\n")
    summary = obj.summary(_decode(record, target, target_where), target_where)
    documents = _split_cluster(obj, source_text, MULTINEWS_SEPARATOR, "src")
    return _documents_example(obj, obj.default_id, summary, _cluster_or_placeholder(obj, documents), "src")


def _parse_aclsum(obj: _Fields) -> Example:
    """S2ORC JSON: the abstract is the summary, body paragraphs grouped by top-level section."""
    # One paper per .json file: the file is named by the paper's id (the aclsum
    # release's "paper_id" fields hold only the year). JSON lines carry "paper_id".
    path = Path(obj.record.path)
    example_id = path.stem if path.suffix == ".json" else obj.get(ACLSUM_ID, str)
    abstract = obj.get("abstract", (str, list))
    if isinstance(abstract, list):  # S2ORC's pdf_parse style: [{"text": ...}, ...]
        abstract = "\n".join(obj.get("text", str, obj.check(p, dict, f"abstract[{i}]"), f"abstract[{i}].text")
                             for i, p in enumerate(abstract))
    summary = obj.summary(abstract, "abstract")
    pdf_parse = obj.get("pdf_parse", dict)
    body = obj.get("body_text", list, pdf_parse, "pdf_parse.body_text")
    groups: list[tuple[str, str, list[str]]] = []  # (key, name, paragraphs)
    for i, paragraph in enumerate(body):
        where = f"pdf_parse.body_text[{i}]"
        obj.check(paragraph, dict, where)
        text = obj.get("text", str, paragraph, f"{where}.text").strip()
        name = _optional(obj, paragraph, "section", str, where).strip()
        number = _optional(obj, paragraph, "sec_num", (str, int), where)
        key = str(number).split(".")[0] if number else name
        if not groups or groups[-1][0] != key:
            groups.append((key, name, []))
        groups[-1][2].append(text)
    units = [Unit("\n".join(p for p in paragraphs if p), name) for _, name, paragraphs in groups]
    return obj.example(example_id, summary, units, "sections", "pdf_parse.body_text")


def _optional(obj: _Fields, container: dict, name: str, kind: type | tuple, where: str):
    """A field that may be missing or null (then ""), else of type ``kind``."""
    value = container.get(name)
    return "" if value is None else obj.check(value, kind, f"{where}.{name}")


_PARSERS: dict[str, Callable[[_Fields], Example]] = {
    "jsonl": _parse_jsonl,
    "arxiv": _parse_cohan,
    "pubmed": _parse_cohan,
    "govreport": _parse_govreport,
    "multinews": _parse_multinews_json,
    "aclsum": _parse_aclsum,
}


# --------------------------------------------------------------------------- Python callers


SECTION = "a section is a (name, text) pair or a {'name': ..., 'text': ...} dict, of strings"


def example_from_raw(doc: str | Sequence, id: str = "0", summary: str = "") -> Example:
    """Build an ``Example`` from a document given in Python.

    ``doc`` is a plain document (``str``), a list of sections (``{"name", "text"}`` dicts
    or ``(name, text)`` tuples, of strings), or a list of ``str`` (the documents of a
    cluster). Any other shape raises ``MalformedDocument`` (``document_kind``); a document
    with no text, or a cluster with an empty document (which ``pagesum-preprocess`` refuses
    too), ``EmptyDocument``, each in one line.
    """
    kind = document_kind(doc)
    if kind == "text":
        units = [Unit(doc.strip())]
    elif kind == "documents":
        empty = next((j for j, text in enumerate(doc) if not text.strip()), None)
        if empty is not None:
            raise errors.EmptyDocument(f"source document {empty} of the cluster is empty")
        units = [Unit(text.strip()) for text in doc]
    else:
        units = [Unit(text.strip(), name.strip()) for name, text in (_section(item, j) for j, item in enumerate(doc))]
    units = [unit for unit in units if unit.text]
    if not units:
        raise errors.EmptyDocument("the document is empty")
    return Example(str(id), summary, units, kind)


def document_kind(doc) -> str:
    """What a document given in Python is: "text" (a string), "sections" (a list of sections) or
    "documents" (a list of strings: a cluster). Anything else raises ``MalformedDocument`` in
    one line, never to be misread: a single (name, text) pair is a section, not a cluster of
    two documents, and a list mixing strings and sections is neither."""
    if isinstance(doc, str):
        return "text"
    if isinstance(doc, dict) or isinstance(doc, tuple) and len(doc) == 2 and all(isinstance(x, str) for x in doc):
        raise errors.MalformedDocument("a single section is not a document: wrap a document's sections in a list, "
                                       "[(name, text), ...], and a cluster's documents in a list of strings")
    if not isinstance(doc, (list, tuple)):
        raise errors.MalformedDocument(f"not a document ({type(doc).__name__}): give a string, a list of sections "
                                       f"or a list of strings (a cluster)")
    strings = [isinstance(item, str) for item in doc]
    if all(strings):
        return "documents"
    if any(strings):
        raise errors.MalformedDocument(f"item {strings.index(True)} is a string and item {strings.index(False)} is "
                                       f"not: a list holds sections or a cluster's documents (strings), not both")
    for j, item in enumerate(doc):
        _section(item, j)
    return "sections"


def _section(item, j: int) -> tuple:
    """Section ``j`` of a document as (name, text), refused in one line unless it is a (name,
    text) pair or a {"name", "text"} dict, of strings."""
    if isinstance(item, dict):
        missing = [key for key in ("name", "text") if key not in item]
        if missing:
            raise errors.MalformedDocument(f"section {j} has no {missing[0]!r}; {SECTION}")
        values = (item["name"], item["text"])
    elif isinstance(item, (list, tuple)) and len(item) == 2:
        values = tuple(item)
    else:
        size = f" of {len(item)} items" if isinstance(item, (list, tuple)) else ""
        raise errors.MalformedDocument(f"section {j} is not a section ({type(item).__name__}{size}); {SECTION}")
    for key, value in zip(("name", "text"), values):
        if not isinstance(value, str):
            raise errors.MalformedDocument(f"section {j}: its {key!r} is {type(value).__name__}, not a string")
    return values
