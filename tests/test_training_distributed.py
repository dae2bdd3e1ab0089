"""Data-parallel training through fairseq's own distributed path, on CPU with the gloo
backend: two processes that each see half of every update train exactly as one process
that accumulates the two halves (``--update-freq 2``), and a checkpoint written by the two
resumes in one. This is the multi-GPU recipe's arithmetic, without GPUs. (fairseq's
pytorch_ddp wrapper gives DDP a device id, which torch refuses for a CPU module, so these runs
use fairseq's legacy_ddp wrapper: the same all-reduce of the summed gradients.)"""

import subprocess

import pytest
import torch

from builders.cli import TRAIN_FLAGS, run_cli, subprocess_env
from pagesum_plugin.checkpoints.safety import load_checkpoint_file

pytestmark = pytest.mark.slow  # three short fairseq-train runs, two of them in two processes

EPOCH = ["--max-epoch", "1"]  # the copy task's 14 batches: 7 updates of 2 batches in both layouts
ONE_THREAD = dict(OMP_NUM_THREADS="1")  # the same arithmetic in every process


def train_in_two_processes(data_dir: str, save_dir: str) -> list:
    """fairseq-train as ranks 0 and 1 of a gloo process group (one process per "device"),
    meeting as the recipes make them meet (a rendezvous file, gloo on loopback): the logs of
    both ranks."""
    init = f"file://{save_dir}/rendezvous"
    flags = [*TRAIN_FLAGS, *EPOCH, "--log-interval", "1", "--save-dir", save_dir, "--distributed-backend", "gloo",
             "--distributed-world-size", "2", "--distributed-init-method", init, "--distributed-no-spawn",
             "--ddp-backend", "legacy_ddp"]
    ranks = [subprocess.Popen(["fairseq-train", data_dir, *flags, "--distributed-rank", str(rank)],
                              env=subprocess_env(**ONE_THREAD, GLOO_SOCKET_IFNAME="lo"), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    logs = [rank.communicate(timeout=600)[0] for rank in ranks]
    for rank, log in zip(ranks, logs):
        assert rank.returncode == 0, log[-4000:]
    return logs


def weights(save_dir) -> dict:
    return load_checkpoint_file(f"{save_dir}/checkpoint_last.pt")["model"]


def logged_losses(log: str) -> list:
    return [line.split("loss=")[1].split(",")[0] for line in log.splitlines() if "| train_inner |" in line]


@pytest.fixture(scope="module")
def runs(copy_task_dir, tmp_path_factory):
    """{name: (save_dir, logs)}: one epoch in two processes, and in one with --update-freq 2."""
    two = str(tmp_path_factory.mktemp("two_processes"))
    one = str(tmp_path_factory.mktemp("one_process"))
    two_logs = train_in_two_processes(copy_task_dir, two)
    one_log = run_cli(["fairseq-train", copy_task_dir, *TRAIN_FLAGS, *EPOCH,
                       "--update-freq", "2", "--save-dir", one, "--log-interval", "1"], **ONE_THREAD)
    return {"two": (two, two_logs), "one": (one, [one_log])}


def test_two_processes_train_as_one_process_accumulating_two_batches(runs):
    (two, two_logs), (one, [one_log]) = runs["two"], runs["one"]
    for rank, log in enumerate(two_logs):
        assert f"distributed init (rank {rank})" in log
    assert logged_losses(two_logs[0]) == logged_losses(one_log)  # every update, as the one process logs it
    ours, reference = weights(two), weights(one)
    assert ours.keys() == reference.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], reference[name], atol=1e-6, rtol=1e-5, msg=name)


def test_a_checkpoint_of_two_processes_resumes_in_one(runs, copy_task_dir, tmp_path):
    """Resuming the two-process checkpoint for a second epoch in one process gives the
    weights of one process that resumes its own checkpoint. (Resume at an epoch boundary:
    fairseq records the position inside an epoch in batches of the process that wrote it.)"""
    resumed = {}
    for name in ("two", "one"):
        save_dir = tmp_path / name
        save_dir.mkdir()
        run_cli(["fairseq-train", copy_task_dir, *TRAIN_FLAGS, "--max-epoch", "2",
                 "--update-freq", "2", "--save-dir", str(save_dir),
                 "--restore-file", f"{runs[name][0]}/checkpoint_last.pt"], **ONE_THREAD)
        resumed[name] = weights(save_dir)
    for key in resumed["one"]:
        torch.testing.assert_close(resumed["two"][key], resumed["one"][key], atol=1e-6, rtol=1e-5, msg=key)
