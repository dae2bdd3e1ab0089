"""``fairseq-generate --task paged_summarization`` refuses a setting it cannot use in one line
naming it, before it decodes anything: a search setting out of range, an output file it could
not write at the end, a negative ``--top-pages``, ``--eval-rouge-args`` with a key or value the
search would not read (checked whenever given, read or not), and pages longer than the model's
encoder has positions for (checked when the model is built or loaded)."""

import os
import re
import subprocess

import pytest
from fairseq import options, tasks, utils

from builders.cli import USER_DIR, subprocess_env
from builders.models import build_tiny
from pagesum_plugin.checkpoints.builder import save_checkpoint
from pagesum_plugin.errors import SettingError

KNOWN = "beam, lenpen, no_repeat_ngram_size, min_len, max_len_b, top_pages"


def generate_args(data: str, *flags: str):
    """fairseq-generate's arguments for ``data`` and ``flags``, as it parses them."""
    argv = [data, "--user-dir", USER_DIR, "--task", "paged_summarization", *flags]
    return options.parse_args_and_arch(options.get_generation_parser(), argv)


@pytest.mark.parametrize("flags, line", [
    (["--beam", "0"], "--beam 0: must be at least 1"),
    (["--min-len", "-1"], "--min-len -1: must be at least 0"),
    (["--max-len-b", "-1"], "--max-len-b -1: must be at least 0"),
    (["--no-repeat-ngram-size", "-1"], "--no-repeat-ngram-size -1: must be at least 0"),
], ids=["beam", "min-len", "max-len-b", "no-repeat-ngram-size"])
def test_a_search_setting_out_of_range_is_refused_when_the_generator_is_built(copy_task_dir, flags, line):
    """--beam 0 divided by zero in the model at the first step."""
    args = generate_args(copy_task_dir, *flags)
    task = tasks.setup_task(args)
    _, _, model = build_tiny(copy_task_dir)
    with pytest.raises(SettingError) as refused:
        task.build_generator([model], args)
    assert str(refused.value) == line


@pytest.mark.parametrize("option", ["--hypotheses-output", "--page-weights-output"])
def test_an_output_file_in_a_folder_that_does_not_exist_is_refused_before_the_model_loads(copy_task_dir, tmp_path,
                                                                                          option):
    path = tmp_path / "missing" / "out.txt"
    with pytest.raises(SettingError) as refused:
        tasks.setup_task(generate_args(copy_task_dir, option, str(path)))
    assert str(refused.value) == f"{option} {path}: no folder {tmp_path / 'missing'} to write it in; create it first"
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("option", ["--hypotheses-output", "--page-weights-output"])
def test_an_output_file_that_is_a_folder_is_refused_before_the_model_loads(copy_task_dir, tmp_path, option):
    with pytest.raises(SettingError) as refused:
        tasks.setup_task(generate_args(copy_task_dir, option, str(tmp_path)))
    assert str(refused.value) == f"{option} {tmp_path}: a folder; name a file to write"


def test_an_output_file_in_a_folder_that_exists_is_accepted(copy_task_dir, tmp_path):
    task = tasks.setup_task(generate_args(copy_task_dir, "--hypotheses-output", str(tmp_path / "test.hyp")))
    assert task.cfg.hypotheses_output == str(tmp_path / "test.hyp")


def test_a_negative_top_pages_is_refused_not_read_as_every_page(copy_task_dir):
    with pytest.raises(SettingError) as refused:
        tasks.setup_task(generate_args(copy_task_dir, "--top-pages", "-1"))
    assert str(refused.value) == "--top-pages -1: must be at least 0"


EVAL_ROUGE_ARGS = [
    ('{"beem": 8}', f"--eval-rouge-args: beem is not a setting; give an object of {KNOWN}"),
    ('{"bogus": 1}', f"--eval-rouge-args: bogus is not a setting; give an object of {KNOWN}"),
    ('{"beam": 0}', "--eval-rouge-args: beam 0: must be at least 1"),
    ('{"lenpen": "2"}', '--eval-rouge-args: lenpen "2": must be a number'),
    ('{"top_pages": -1}', "--eval-rouge-args: top_pages -1: must be at least 0"),
]


@pytest.mark.parametrize("given, line", EVAL_ROUGE_ARGS, ids=[row[0] for row in EVAL_ROUGE_ARGS])
def test_eval_rouge_args_are_checked_whenever_given_without_eval_rouge_too(copy_task_dir, given, line):
    with pytest.raises(SettingError) as refused:
        tasks.setup_task(generate_args(copy_task_dir, "--eval-rouge-args", given))
    assert str(refused.value) == line
    with pytest.raises(SettingError) as refused:  # fairseq-train, without --eval-rouge
        build_tiny(copy_task_dir, "--eval-rouge-args", given)
    assert str(refused.value) == line


def test_an_example_longer_than_the_models_positions_is_refused_naming_the_setting_that_cuts_it(copy_task_dir):
    """fairseq refuses it at the first batch, advising to skip it: the task names the setting that
    cuts pages and summaries to fit instead, and skips only when told to."""
    args, task, model = build_tiny(copy_task_dir, "--max-source-positions", "8")  # shorter than the copy task's pages
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    positions = utils.resolve_max_positions(task.max_positions(), model.max_positions())
    with pytest.raises(SettingError) as refused:
        task.get_batch_iterator(dataset=dataset, max_sentences=2, max_positions=positions)
    assert re.fullmatch(r"\d+ examples do not fit the model's \(source, summary\) positions \(8, \d+\), "
                        r"the first \(#\d+\) a page of \d+ and a summary of \d+ tokens: cut them to fit with "
                        r"--max-page-tokens and --max-summary-tokens \(--skip-invalid-size-inputs-valid-test skips "
                        r"them\)", str(refused.value))
    too_long = int(str(refused.value).split()[0])
    batches = task.get_batch_iterator(dataset=dataset, max_sentences=2, max_positions=positions,
                                      ignore_invalid_inputs=True).next_epoch_itr(shuffle=False)
    assert sum(len(batch["id"]) for batch in batches) == len(dataset) - too_long > 0  # skipped, as asked
    fits = utils.resolve_max_positions(task.max_positions(), build_tiny(copy_task_dir)[2].max_positions())
    assert len(task.get_batch_iterator(dataset=dataset, max_sentences=2, max_positions=fits)) > 0


@pytest.fixture(scope="module")
def checkpoint(copy_task_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "model.pt"
    args, _, model = build_tiny(copy_task_dir)
    save_checkpoint(path, args, model)
    return str(path)


MISTAKES = [
    ("beam 0", ["--beam", "0"], "--beam 0: must be at least 1"),
    ("an output folder that does not exist", ["--hypotheses-output", "{out}/missing/test.hyp"],
     "--hypotheses-output {out}/missing/test.hyp: no folder {out}/missing to write it in; create it first"),
]


@pytest.mark.slow  # fairseq-generate in its own process
@pytest.mark.parametrize("mistake, flags, line", MISTAKES, ids=[row[0] for row in MISTAKES])
def test_fairseq_generate_prints_one_line_and_writes_nothing(copy_task_dir, checkpoint, tmp_path, mistake, flags,
                                                             line):
    out = str(tmp_path)
    command = ["fairseq-generate", copy_task_dir, "--user-dir", USER_DIR, "--task", "paged_summarization",
               "--path", checkpoint, "--gen-subset", "test", "--cpu", "--max-len-b", "4", "--batch-size", "4",
               *[flag.format(out=out) for flag in flags]]
    result = subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == f"fairseq-generate: error: {line.format(out=out)}"
    assert os.listdir(out) == []
