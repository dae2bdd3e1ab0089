"""An epoch's data-loader workers stop when its batches are read, without waiting for the
garbage collector (which would make torch wait 5 seconds for each, in the middle of
training: see ``pagesum_plugin/tasks/one_dictionary.py``)."""

import gc
import multiprocessing
import time

import pytest

from builders.models import build_tiny


@pytest.fixture
def no_garbage_collector():
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def read_one_epoch(task, split: str) -> int:
    """Batches of one epoch of ``split``, read as fairseq-train reads them: one worker, a
    background buffer, and an iterator that stops at the epoch's length."""
    task.load_dataset(split)
    epoch = task.get_batch_iterator(task.dataset(split), max_tokens=1500, num_workers=1, data_buffer_size=10, epoch=1)
    return sum(1 for _ in epoch.next_epoch_itr(shuffle=True))


def workers_left(before: set, seconds: float) -> set:
    deadline = time.monotonic() + seconds
    while (left := set(multiprocessing.active_children()) - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("split", ["train", "valid"])
def test_an_epochs_workers_stop_once_its_batches_are_read(copy_task_dir, no_garbage_collector, split):
    _, task, _ = build_tiny(copy_task_dir)
    before = set(multiprocessing.active_children())
    assert read_one_epoch(task, split) > 1
    assert workers_left(before, seconds=20) == set()


def test_with_persistent_workers_an_epochs_worker_outlives_its_batches(copy_task_dir, no_garbage_collector):
    """fairseq's default, for a user who asks for it: the worker waits for the next epoch."""
    _, task, _ = build_tiny(copy_task_dir, "--persistent-workers")
    before = set(multiprocessing.active_children())
    assert read_one_epoch(task, "train") > 1
    left = workers_left(before, seconds=2)
    for worker in left:  # stopped here, not by the garbage collector's 5-second wait
        worker.terminate()
    assert len(left) == 1
