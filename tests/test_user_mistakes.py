"""Every user mistake a new user makes ends in one line that says what to change, never a
traceback: one row per mistake, with the exact line."""

import os
import re
import shutil
import subprocess

import pytest
import torch
from fairseq import optim
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from builders.bpe import build_gpt2_bpe
from builders.cli import REPO_ROOT, TRAIN_FLAGS, USER_DIR, subprocess_env
from builders.corpora import acl_papers, write_jsonl
from builders.models import build_tiny
from builders.paged_data import make_dictionary
from pagesum_plugin import from_pretrained
from pagesum_plugin.checkpoints.builder import save_checkpoint
from pagesum_plugin.errors import CheckpointError, SettingError
from pagesum_plugin.registration import report_mistakes
from pagesum_plugin.corpus.format import CorpusMeta
from pagesum_plugin.corpus.storage import load_dictionary
from pagesum_preprocess.cli import main as preprocess


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A folder with a small jsonl split (three papers) and BART-style BPE files."""
    root = tmp_path_factory.mktemp("inputs")
    papers = acl_papers(3)
    write_jsonl(root / "train.jsonl", papers)
    build_gpt2_bpe(root / "bpe", [p["summary"] for p in papers])
    (root / "notes").mkdir()
    (root / "notes" / "todo.txt").write_text("not a data directory\n")
    (root / "news.src").write_text("a story\n")
    (root / "empty.jsonl").write_text("")
    return root


def gpt2(root, **replace):
    files = {"--gpt2-encoder-json": root / "bpe" / "encoder.json", "--gpt2-vocab-bpe": root / "bpe" / "vocab.bpe",
             "--gpt2-dict": root / "bpe" / "dict.txt", **replace}
    return ["--tokenizer", "gpt2", *[str(x) for pair in files.items() for x in pair]]


def jsonl(root, *more):
    return ["--input-format", "jsonl", "--trainpref", str(root / "train.jsonl"), *more]


# (mistake, arguments given the inputs folder, the line printed: exact, or a pattern when it
# holds a count sentencepiece computes)
PREPROCESS_MISTAKES = [
    ("a --trainpref that does not exist",
     lambda r: ["--input-format", "jsonl", "--trainpref", str(r / "nope.jsonl"), *gpt2(r)],
     "--trainpref {root}/nope.jsonl: no such file or folder"),
    ("a --validpref that does not exist, with sentencepiece to train first",
     lambda r: jsonl(r, "--validpref", str(r / "valid.jsonl"), "--tokenizer", "sentencepiece", "--vocab-size", "200"),
     "--validpref {root}/valid.jsonl: no such file or folder"),
    ("sentencepiece's default vocabulary on a small corpus",
     lambda r: jsonl(r, "--tokenizer", "sentencepiece"),
     re.compile(r"--vocab-size 32000: the training split gives sentencepiece at most (\d+) pieces; "
                r"set --vocab-size \1 or less")),
    ("a sentencepiece vocabulary smaller than the corpus's characters",
     lambda r: jsonl(r, "--tokenizer", "sentencepiece", "--vocab-size", "20"),
     re.compile(r"--vocab-size 20: the training split has (\d+) characters and special pieces that every "
                r"vocabulary holds; set --vocab-size \1 or more")),
    ("a missing encoder.json", lambda r: jsonl(r, *gpt2(r, **{"--gpt2-encoder-json": r / "bpe" / "enc.json"})),
     "--gpt2-encoder-json {root}/bpe/enc.json: no such file"),
    ("a missing vocab.bpe", lambda r: jsonl(r, *gpt2(r, **{"--gpt2-vocab-bpe": r / "vocab.bpe"})),
     "--gpt2-vocab-bpe {root}/vocab.bpe: no such file"),
    ("a missing dict.txt", lambda r: jsonl(r, *gpt2(r, **{"--gpt2-dict": r / "dict.txt"})),
     "--gpt2-dict {root}/dict.txt: no such file"),
    ("gpt2 without its files", lambda r: jsonl(r, "--tokenizer", "gpt2"),
     "--tokenizer gpt2 needs --gpt2-encoder-json, --gpt2-vocab-bpe, --gpt2-dict (BART's encoder.json, vocab.bpe, "
     "dict.txt)"),
    ("a --sentencepiece-model that does not exist",
     lambda r: jsonl(r, "--tokenizer", "sentencepiece", "--sentencepiece-model", str(r / "spm.model")),
     "--sentencepiece-model {root}/spm.model: no such file"),
    ("a --sentencepiece-model with the gpt2 tokenizer",
     lambda r: jsonl(r, *gpt2(r), "--sentencepiece-model", str(r / "train.jsonl")),
     "--sentencepiece-model needs --tokenizer sentencepiece"),
    ("--num-pages 0", lambda r: jsonl(r, *gpt2(r), "--num-pages", "0"),
     "--num-pages 0: must be at least 1 (pages per example)"),
    ("--max-pages 0", lambda r: jsonl(r, *gpt2(r), "--max-pages", "0"),
     "--max-pages 0: must be at least 1 (pages per example)"),
    ("pages too short for <s> and </s>", lambda r: jsonl(r, *gpt2(r), "--max-page-tokens", "2"),
     "--max-page-tokens 2: must be at least 3 (room for <s>, one token and </s>)"),
    ("--workers 0", lambda r: jsonl(r, *gpt2(r), "--workers", "0"), "--workers 0: must be at least 1 (processes)"),
    ("no split at all", lambda r: ["--input-format", "jsonl", *gpt2(r)],
     "give at least one of --trainpref, --validpref, --testpref"),
    ("a folder given to a one-file format", lambda r: ["--input-format", "jsonl", "--trainpref", str(r), *gpt2(r)],
     "--trainpref {root}: is a folder; --input-format jsonl reads one file per split"),
    ("a Multi-News source without its targets",
     lambda r: ["--input-format", "multinews", "--trainpref", str(r / "news.src"), *gpt2(r)],
     "--trainpref {root}/news.src: its summaries {root}/news.tgt do not exist"),
    ("an empty training split, with sentencepiece to train on it",
     lambda r: ["--input-format", "jsonl", "--trainpref", str(r / "empty.jsonl"), "--tokenizer", "sentencepiece",
                "--vocab-size", "50"],
     "{root}/empty.jsonl: the train split holds no example to train sentencepiece on"),
    ("an empty validation split", lambda r: jsonl(r, *gpt2(r), "--validpref", str(r / "empty.jsonl")),
     "{root}/empty.jsonl: the valid split holds no example"),
    ("an output folder that holds something else",
     lambda r: jsonl(r, *gpt2(r), "--destdir", str(r / "notes")),
     "--destdir {root}/notes: exists and is not a pagesum-preprocess data directory; choose a new folder"),
]


@pytest.mark.parametrize("mistake, argv, line", PREPROCESS_MISTAKES, ids=[row[0] for row in PREPROCESS_MISTAKES])
def test_each_preprocess_mistake_prints_one_line(inputs, tmp_path, capsys, mistake, argv, line):
    args = argv(inputs)
    if "--destdir" not in args:
        args += ["--destdir", str(tmp_path / "data")]
    assert preprocess([*args, "--no-progress"]) == 2  # returned: no exception reached the user
    printed = [x for x in capsys.readouterr().err.splitlines() if x.startswith("pagesum-preprocess: error: ")]
    assert len(printed) == 1
    message = printed[0][len("pagesum-preprocess: error: "):]
    if isinstance(line, str):
        assert message == line.format(root=inputs)
    else:
        assert line.fullmatch(message), message
    assert not (tmp_path / "data").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".data.")] == []  # no staging folder left


def test_every_input_is_checked_before_sentencepiece_trains(inputs, tmp_path, caplog):
    args = jsonl(inputs, "--testpref", str(inputs / "test.jsonl"), "--tokenizer", "sentencepiece",
                 "--vocab-size", "200", "--destdir", str(tmp_path / "data"))
    assert preprocess(args) == 2
    assert "training sentencepiece" not in caplog.text


def test_the_console_command_prints_no_traceback(inputs, tmp_path):
    result = subprocess.run(["pagesum-preprocess", *jsonl(inputs, "--tokenizer", "sentencepiece"),
                             "--destdir", str(tmp_path / "data"), "--no-progress"],
                            env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].startswith("pagesum-preprocess: error: --vocab-size 32000: ")


# ---- the Python API -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(paged, tmp_path_factory):
    """A checkpoint folder (apart from its data) holding checkpoint_best.pt of a tiny model
    over the ``paged`` data, and a file that is not a checkpoint."""
    folder = tmp_path_factory.mktemp("checkpoints")
    args, _, model = build_tiny(paged)
    save_checkpoint(folder / "checkpoint_best.pt", args, model)
    (folder / "notes.pt").write_text("training notes\n")
    torch.save({"weights": torch.zeros(2)}, folder / "weights.pt")
    return folder


@pytest.fixture(scope="module")
def other_data(tmp_path_factory):
    """A data directory whose dictionary is not the model's."""
    folder = tmp_path_factory.mktemp("other_data")
    dictionary = make_dictionary(90)
    dictionary.save(str(folder / "dict.txt"))
    CorpusMeta(tokenizer="none", dictionary_size=len(dictionary)).save(folder)
    return folder


API_MISTAKES = [
    ("a file that is not a checkpoint", lambda c, o: dict(model_dir=c, checkpoint_file="notes.pt"),
     "{c}/notes.pt: not a checkpoint (fairseq-train and pagesum-convert write them with torch.save; this file "
     "is something else)"),
    ("a torch file that is not a fairseq checkpoint", lambda c, o: dict(model_dir=c, checkpoint_file="weights.pt"),
     "{c}/weights.pt: a torch.save file that is not a fairseq checkpoint (KeyError: 'best_loss')"),
    ("a checkpoint name that is not in the folder", lambda c, o: dict(model_dir=c, checkpoint_file="best.pt"),
     "{c}/best.pt: no such checkpoint; {c} holds checkpoint_best.pt, notes.pt, weights.pt (pass its name as "
     "checkpoint_file)"),
    ("a folder that does not exist", lambda c, o: dict(model_dir=c / "missing"),
     "{c}/missing: no such folder or checkpoint file"),
    ("a data folder whose dictionary is not the model's", lambda c, o: dict(model_dir=c, data_name_or_path=str(o)),
     "{o}: its dict.txt has 96 symbols, but {c}/checkpoint_best.pt was trained with {rows}; pass "
     "data_name_or_path= the data directory the model was trained on"),
]


@pytest.mark.parametrize("mistake, call, line", API_MISTAKES, ids=[row[0] for row in API_MISTAKES])
def test_each_from_pretrained_mistake_raises_one_line(trained, other_data, paged, mistake, call, line):
    with pytest.raises(CheckpointError) as raised:
        from_pretrained(**{k: str(v) for k, v in call(trained, other_data).items()})
    rows = len(load_dictionary(paged))  # the model's embedding rows
    assert str(raised.value) == line.format(c=trained, o=other_data, rows=rows)
    error = raised.value  # the user sees this line, not torch's or fairseq's traceback under it
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)


def test_from_pretrained_takes_the_checkpoint_file_itself(trained, paged):
    hub = from_pretrained(str(trained / "checkpoint_best.pt"))
    assert hub.data_dir == paged


def test_from_pretrained_reads_the_data_directory_stored_in_the_checkpoint(trained, paged):
    assert not (trained / "meta.json").exists()
    assert from_pretrained(str(trained)).data_dir == paged


def test_from_pretrained_says_where_it_looked_for_a_moved_data_directory(paged, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(paged, data)
    args, _, model = build_tiny(str(data))
    save_checkpoint(tmp_path / "checkpoint_best.pt", args, model)
    shutil.rmtree(data)
    with pytest.raises(CheckpointError) as raised:
        from_pretrained(str(tmp_path))
    assert str(raised.value) == (f"{tmp_path}/checkpoint_best.pt: no data directory ({data}/meta.json or "
                                 f"{tmp_path}/meta.json not found); pass data_name_or_path= the folder "
                                 f"pagesum-preprocess wrote for this model")


# ---- fairseq's own commands -------------------------------------------------------------------

def test_user_dir_by_name_works_from_any_folder(tmp_path):
    result = subprocess.run(["fairseq-train", "--user-dir", "pagesum_plugin", "--help"], cwd=tmp_path,
                            env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "paged_label_smoothed_cross_entropy" in result.stdout  # the plugin's criterion is registered


# ---- fairseq's own commands -----------------------------------------------------------------

FAIRSEQ_MISTAKES = [
    ("a file that is not a checkpoint", ["fairseq-generate", "{data}", "--user-dir", USER_DIR, "--task",
                                         "paged_summarization", "--path", "{readme}", "--cpu"],
     "fairseq-generate: error: {readme}: not a checkpoint (fairseq-train and pagesum-convert write them with "
     "torch.save; this file is something else)"),
    ("no pages", ["fairseq-train", "{data}", *TRAIN_FLAGS, "--num-pages", "0", "--save-dir", "{out}"],
     "fairseq-train: error: --num-pages 0: must be at least 1 (leave it out for the corpus's own, {pages})"),
    ("fewer than no pages", ["fairseq-train", "{data}", *TRAIN_FLAGS, "--num-pages", "-1", "--save-dir", "{out}"],
     "fairseq-train: error: --num-pages -1: must be at least 1 (leave it out for the corpus's own, {pages})"),
]


@pytest.mark.slow  # fairseq's commands in their own processes
@pytest.mark.parametrize("mistake, argv, line", FAIRSEQ_MISTAKES, ids=[m[0] for m in FAIRSEQ_MISTAKES])
def test_each_mistake_in_fairseqs_commands_prints_one_line_and_writes_nothing(copy_task_dir, tmp_path, mistake,
                                                                              argv, line):
    names = dict(data=copy_task_dir, readme=os.path.join(REPO_ROOT, "README.md"), out=str(tmp_path / "run"),
                 pages=CorpusMeta.load(copy_task_dir).num_pages)
    result = subprocess.run([a.format(**names) for a in argv], env=subprocess_env(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "weights_only" not in result.stderr
    assert "DEBUG:" not in result.stderr  # Hydra's notices at fairseq's every command
    assert result.stderr.splitlines()[-1] == line.format(**names)
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


# Settings the plugin refuses when it builds what they set (the task, the model, the criterion, the
# optimizer): each a SettingError, which fairseq's commands print as one line, as the rows above show
SETTING_MISTAKES = [
    ("an unknown view", ["--view", "pages"],
     "unknown view 'pages'; choose from spatial, discourse, document, token, flat, documents, segments "
     "(--view, --spatial-split, --placeholder-pages)"),
    ("a negative loss chunk", ["--loss-chunk-tokens", "-1"], "--loss-chunk-tokens must be 0 (off) or more, got -1"),
    ("a HEPOS stride past the heads", ["--arch", "hepos_tiny", "--view", "flat", "--hepos-stride", "99"],
     "--hepos-stride must be between 1 and the number of heads (4) so that the heads cover every position, got 99"),
    ("Adafactor's epsilons as one number", ["--optimizer", "adafactor_batched", "--adafactor-eps", "1e-30"],
     "--adafactor-eps 1e-30: not a pair of numbers, as (1e-30, 1e-3)"),
]


@pytest.mark.parametrize("mistake, flags, line", SETTING_MISTAKES, ids=[m[0] for m in SETTING_MISTAKES])
def test_each_setting_the_plugin_refuses_is_a_setting_error_that_names_it(copy_task_dir, mistake, flags, line):
    with pytest.raises(SettingError) as refused:
        args, task, model = build_tiny(copy_task_dir, *flags)
        task.build_criterion(args)
        optim.build_optimizer(convert_namespace_to_omegaconf(args).optimizer, list(model.parameters()))
    assert str(refused.value) == line


def test_the_plugins_mistakes_and_an_interruption_are_one_line_and_the_rest_keeps_its_traceback(capsys):
    passed = []
    report = report_mistakes(lambda *exc: passed.append(exc[0]))
    report(SettingError, SettingError("--num-pages 0: must be at least 1"), None)
    report(KeyboardInterrupt, KeyboardInterrupt(), None)
    report(ZeroDivisionError, ZeroDivisionError("x"), None)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == ["error: --num-pages 0: must be at least 1", "interrupted"]
    assert passed == [ZeroDivisionError]
