"""What ``summarize()`` refuses: a document of none of its shapes (a string, a list of sections,
a list of strings: a cluster) is a ``MalformedDocument`` naming the document and what is wrong,
never misread and never skipped; a cluster with an empty document is empty, as
pagesum-preprocess says; a setting of the wrong type or range is a ``SettingError`` naming it.
Each in one line, before anything is decoded."""

import pytest

from builders.models import build_tiny
from pagesum_plugin.errors import SettingError
from pagesum_plugin.hub_interface import PageSumHubInterface
from pagesum_plugin.summaries import EmptyDocument, MalformedDocument

pytestmark = pytest.mark.usefixtures("one_thread")

GEN = dict(beam=1, min_len=1, max_len_b=3, no_repeat_ngram_size=0)  # what is decoded does not matter here
TEXT = "We parse documents. The model reads pages. It writes summaries."
SECTION = "a section is a (name, text) pair or a {'name': ..., 'text': ...} dict, of strings"


@pytest.fixture(scope="module")
def hub(paged):
    _, task, model = build_tiny(paged)
    return PageSumHubInterface(task, model, paged)


def one_line(error: Exception) -> str:
    message = str(error)
    assert "\n" not in message and error.__cause__ is None
    return message


def test_the_documented_shapes_are_read_alike(hub):
    as_pairs = [("Intro", TEXT), ("Method", TEXT)]
    as_dicts = [{"name": "Intro", "text": TEXT}, {"name": "Method", "text": TEXT}]
    assert hub.sentences(as_pairs) == hub.sentences(as_dicts) == hub.sentences([list(p) for p in as_pairs])
    assert hub.sentences([TEXT, TEXT]) == hub.sentences(TEXT) * 2  # a cluster of two documents
    assert len(hub.summarize([TEXT, as_pairs, as_dicts, [TEXT, TEXT]], **GEN)) == 4


def test_a_section_whose_text_is_not_a_string_is_refused_naming_the_section_and_the_field(hub):
    with pytest.raises(MalformedDocument) as refused:
        hub.sentences([{"name": "Intro", "text": None}])
    assert one_line(refused.value) == "section 0: its 'text' is NoneType, not a string"
    with pytest.raises(MalformedDocument) as refused:
        hub.summarize([TEXT, [("Intro", TEXT), ("Method", 5)]], **GEN)
    assert one_line(refused.value) == "document 1: section 1: its 'text' is int, not a string"


def test_a_list_mixing_strings_and_sections_is_refused_not_unpacked(hub):
    with pytest.raises(MalformedDocument) as refused:
        hub.sentences(["ab", ("Intro", "We parse.")])
    assert one_line(refused.value) == ("item 0 is a string and item 1 is not: a list holds sections or a cluster's "
                                       "documents (strings), not both")


@pytest.mark.parametrize("skip_invalid", [False, True])
def test_a_malformed_document_is_refused_as_malformed_not_as_empty_and_never_skipped(hub, skip_invalid):
    with pytest.raises(MalformedDocument) as refused:
        hub.summarize([TEXT, ["A document.", ("Intro", "We parse.")]], skip_invalid=skip_invalid, **GEN)
    assert not isinstance(refused.value, EmptyDocument)
    assert one_line(refused.value).startswith("document 1: item 0 is a string and item 1 is not")


MALFORMED = [
    ("a section without text", [[{"name": "Intro"}]], f"document 0: section 0 has no 'text'; {SECTION}"),
    ("a section without a name", [[{"text": TEXT}]], f"document 0: section 0 has no 'name'; {SECTION}"),
    ("a section of three items", [[("Intro", TEXT, "x")]],
     f"document 0: section 0 is not a section (tuple of 3 items); {SECTION}"),
    ("a section name that is not a string", [[(None, TEXT)]], "document 0: section 0: its 'name' is NoneType, "
                                                               "not a string"),
    ("None", [TEXT, None], "document 1: not a document (NoneType): give a string, a list of sections or a list of "
                           "strings (a cluster)"),
    ("a number", [5], "document 0: not a document (int): give a string, a list of sections or a list of strings "
                      "(a cluster)"),
    ("no list of documents", None, "documents (NoneType): give a list of documents, or one string"),
]


@pytest.mark.parametrize("mistake, documents, line", MALFORMED, ids=[row[0] for row in MALFORMED])
def test_each_malformed_document_is_one_line_naming_it(hub, mistake, documents, line):
    with pytest.raises(MalformedDocument) as refused:
        hub.summarize(documents, **GEN)
    assert one_line(refused.value) == line


@pytest.mark.parametrize("sections", [
    [("Intro", TEXT), ("Method", TEXT)],
    [{"name": "Intro", "text": TEXT}, {"name": "Method", "text": TEXT}],
], ids=["pairs", "dicts"])
def test_sections_given_as_the_documents_are_refused_saying_to_wrap_them_in_a_list(hub, sections):
    """A bare (name, text) pair would be a cluster of two documents, the name one of them."""
    with pytest.raises(MalformedDocument) as refused:
        hub.summarize(sections, **GEN)
    assert one_line(refused.value) == ("document 0: a single section is not a document: wrap a document's sections in "
                                       "a list, [(name, text), ...], and a cluster's documents in a list of strings")
    assert len(hub.summarize([sections], **GEN)) == 1  # wrapped: one document of two sections


def test_a_cluster_with_an_empty_document_is_refused_as_preprocessing_refuses_it(hub):
    cluster = ["First article. It has words.", "  "]
    with pytest.raises(EmptyDocument) as refused:
        hub.pages(cluster)
    assert one_line(refused.value) == "source document 1 of the cluster is empty"
    with pytest.raises(EmptyDocument) as refused:
        hub.summarize([TEXT, cluster], **GEN)
    assert one_line(refused.value).startswith("document 1: source document 1 of the cluster is empty; "
                                              "pass skip_invalid=True")


def test_a_cluster_with_an_empty_document_is_skipped_and_counted_with_skip_invalid(hub):
    summaries = hub.summarize([["First article. It has words.", ""], TEXT], skip_invalid=True, **GEN)
    assert summaries[0] is None and isinstance(summaries[1], str)
    assert summaries.skipped == {0: "source document 1 of the cluster is empty"}


SETTINGS = [
    (dict(batch_size=0), "batch_size=0: must be at least 1"),
    (dict(beam=0), "beam=0: must be at least 1"),
    (dict(beam=2.0), "beam=2.0: must be a whole number"),
    (dict(lenpen="2"), "lenpen='2': must be a number"),
    (dict(top_pages=-1), "top_pages=-1: must be at least 0"),
    (dict(min_len=-1), "min_len=-1: must be at least 0"),
    (dict(max_len_b=-1), "max_len_b=-1: must be at least 0"),
    (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size=-1: must be at least 0"),
    (dict(num_pages=0), "num_pages=0: must be at least 1"),
    (dict(max_pages="8"), "max_pages='8': must be a whole number"),
]


@pytest.mark.parametrize("given, line", SETTINGS, ids=[line.split(":")[0] for _, line in SETTINGS])
def test_each_setting_summarize_cannot_use_is_one_line_naming_it(hub, given, line):
    with pytest.raises(SettingError) as refused:
        hub.summarize([TEXT], **{**GEN, **given})
    assert one_line(refused.value) == line
