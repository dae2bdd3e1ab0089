"""Shared fixtures: tiny corpora and a trained run, built on the fly. Helpers live in
``tests/builders/``; tests import them from there, never from this file."""

import os
import sys
import warnings

import pytest

# Notices about third-party code, raised while this file imports fairseq: fairseq's modules use
# torch.jit.script, which torch deprecates, and its reference attention mixes mask types
warnings.filterwarnings("ignore", message="`torch.jit.script(_method)?` is deprecated", category=DeprecationWarning)

# Each of several workers (pytest-xdist's -n), and every command it starts, computes on its share of
# the cores: with torch's default of one thread per core, the README's two workers on two cores ran
# four threads, which wait on each other (docs/testing.md has the times). Set before torch is
# imported; a caller may override it.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // WORKERS)))

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

from builders.cli import TRAIN_FLAGS, run_cli  # noqa: E402
from builders.corpora import acl_papers, paged_sentencepiece_data, write_jsonl  # noqa: E402
from builders.hepos import single_thread  # noqa: E402
from builders.models import build_tiny  # noqa: E402
from builders.paged_data import write_copy_task  # noqa: E402
from pagesum_plugin.registration import FAIRSEQ_NOTICES  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """The files that hold slow tests (end-to-end runs of minutes) run first. The README's command
    gives each of two workers whole files (``--dist loadfile``): a long file started last would
    leave the other worker idle while it runs."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end runs of the console commands (deselect with -m 'not slow')")
    config.addinivalue_line("filterwarnings", "ignore:`torch.jit.script(_method)?` is deprecated:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:Support for mismatched key_padding_mask and attn_mask")
    # fairseq's batch iterator asks every DataLoader for pinned memory, which a machine without a GPU has not
    config.addinivalue_line("filterwarnings", "ignore:'pin_memory' argument is set as true but no accelerator:UserWarning")
    for notice in FAIRSEQ_NOTICES:  # the plugin silences them on import, which pytest undoes around each test
        config.addinivalue_line("filterwarnings", f"ignore:{notice}")


@pytest.fixture(scope="session")
def copy_task_dir(tmp_path_factory):
    """A synthetic corpus of token ids (summary = the marked page)."""
    data_dir = str(tmp_path_factory.mktemp("copy_task"))
    write_copy_task(data_dir)
    return data_dir


@pytest.fixture(scope="session")
def copy_task_batch(copy_task_dir):
    """Four validation examples of the copy task, collated as fairseq's trainer gets them."""
    _, task, _ = build_tiny(copy_task_dir)
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    return dataset.collater([dataset[i] for i in range(4)])


@pytest.fixture(scope="session")
def trained_run(copy_task_dir, tmp_path_factory):
    """fairseq-train on the copy task for six epochs (the validation loss has levelled off by then):
    (save_dir, training log). Shared by the training tests."""
    save_dir = str(tmp_path_factory.mktemp("run"))
    log = run_cli(["fairseq-train", copy_task_dir, *TRAIN_FLAGS, "--max-update", "72", "--save-dir", save_dir])
    return save_dir, log


@pytest.fixture(scope="module")
def papers(request):
    """Real ACL papers: the test module's ``PAPERS = (count, offset)``, by default the first 6."""
    count, offset = getattr(request.module, "PAPERS", (6, 0))
    return acl_papers(count, offset=offset)


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory, papers):
    """``papers`` in the generic jsonl format (sections)."""
    return str(write_jsonl(tmp_path_factory.mktemp("jsonl") / "test.jsonl", papers))


@pytest.fixture(scope="module")
def paged(tmp_path_factory, jsonl):
    """``papers`` preprocessed into discourse pages with a small sentencepiece vocabulary."""
    return paged_sentencepiece_data(jsonl, tmp_path_factory.mktemp("paged") / "data")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models on one CPU thread (``pytestmark = pytest.mark.usefixtures("one_thread")``):
    at these sizes more threads cost more than they save, and far more on a busy machine."""
    with single_thread():
        yield
