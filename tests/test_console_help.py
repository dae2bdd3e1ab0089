"""Every console command that setup.py installs answers ``--help`` and a usage error before any
heavy import: in a fresh interpreter, its entry point leaves none of torch, fairseq, NLTK, scipy,
scikit-learn, matplotlib and ``transformers`` imported, and prints nothing but its own lines (no
fairseq import chatter). A command that needs the library whole still registers it after parsing."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.commands import console_scripts

SETUP = Path(__file__).resolve().parents[1] / "setup.py"
HEAVY = ("torch", "fairseq", "nltk", "scipy", "sklearn", "matplotlib", "transformers")

# Runs ENTRY (module:function) as its console script does, with the command's name as sys.argv[0],
# then reports its exit status, the heavy modules it imported and whether fairseq knows the plugin.
PROBE = f"""
import importlib, json, sys
entry, sys.argv = sys.argv[1], sys.argv[2:]
module, function = entry.split(":")
try:
    status = getattr(importlib.import_module(module), function)()
except SystemExit as exit:
    status = exit.code
if isinstance(status, str):  # sys.exit(message): the interpreter prints it and exits with 1
    print(status, file=sys.stderr)
    status = 1
registered = "fairseq.tasks" in sys.modules and "paged_summarization" in sys.modules["fairseq.tasks"].TASK_REGISTRY
print(json.dumps({{"status": status or 0, "loaded": [name for name in {HEAVY!r} if name in sys.modules],
                  "registered": registered}}), file=sys.stderr)
"""


SCRIPTS = console_scripts(SETUP)  # name -> module:function


def probe(name: str, *argv: str) -> tuple[dict, str, list[str]]:
    """The probe's report, the command's standard output and its other lines of standard error."""
    done = subprocess.run([sys.executable, "-c", PROBE, SCRIPTS[name], name, *argv], capture_output=True, text=True,
                          timeout=300)
    *chatter, report = done.stderr.strip().splitlines()
    return json.loads(report), done.stdout, chatter


def test_setup_declares_every_command():
    assert len(SCRIPTS) >= 17 and "pagesum-score" in SCRIPTS and "pagesum-preprocess" in SCRIPTS


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_help_imports_nothing_heavy_and_prints_only_its_usage(name):
    report, out, chatter = probe(name, "--help")
    assert report == {"status": 0, "loaded": [], "registered": False}
    assert out.startswith(f"usage: {name} ")
    assert chatter == []  # no "Please install tensorboardX", no logging from an import


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_usage_error_imports_nothing_heavy(name):
    report, _, chatter = probe(name, "--no-such-option")
    assert report["status"] != 0 and report["loaded"] == []
    assert any(line.startswith("usage: ") for line in chatter)


def test_a_torch_command_registers_the_plugin_after_parsing(tmp_path):
    report, _, chatter = probe("pagesum-awesome-label", str(tmp_path / "missing"))
    assert report["status"] == 2 and report["registered"] and "torch" in report["loaded"]
    assert any(str(tmp_path / "missing") in line and "pagesum-awesome-label: error" in line for line in chatter)


def test_every_torch_command_imports_its_work_after_its_parser_and_the_registration():
    # the order pagesum_commands.run follows, for all of them in one interpreter: parsers first,
    # with neither torch nor fairseq imported, then the registration, then every work module (no
    # import cycle breaks)
    check = """
import importlib, sys
from pagesum_commands import COMMANDS, REGISTRATION
torch_commands = [command for command in COMMANDS.values() if not command.text_only]
for command in torch_commands:
    module, function = command.parser.split(":")
    getattr(importlib.import_module(module), function)()
assert "torch" not in sys.modules and "fairseq" not in sys.modules, "a parser imported torch or fairseq"
importlib.import_module(REGISTRATION)
print(len(torch_commands), all(callable(importlib.import_module(command.work).main) for command in torch_commands))
"""
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["8", "True"], done.stderr


def test_a_torch_command_at_work_logs_in_its_own_format_with_no_import_chatter(tmp_path):
    # fairseq's import would otherwise give the process a DEBUG console handler of its own first:
    # "INFO:fairseq.tasks.text_to_speech:Please install tensorboardX", then every line in its format
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "summary": "A summary.", "sections": [["Intro", ["One sentence."]]]}\n')
    report, _, chatter = probe("pagesum-preprocess", "--input-format", "jsonl", "--dataset", "x", "--trainpref",
                               str(bad), "--destdir", str(tmp_path / "out"), "--tokenizer", "sentencepiece")
    assert report["status"] == 1 and report["registered"]
    assert chatter and all(line.startswith("pagesum-preprocess | ") for line in chatter), chatter
    assert f"{bad}, line 1, field 'sections[0]'" in chatter[-1]
    assert not (tmp_path / "out").exists()


IMPORTS = """
import sys
{before}
import pagesum_plugin
{after}
registered = "fairseq.tasks" in sys.modules and "paged_summarization" in sys.modules["fairseq.tasks"].TASK_REGISTRY
print(sorted(name for name in ("torch", "fairseq") if name in sys.modules), registered)
"""


@pytest.mark.parametrize("before, after, expected", [
    ("", "", "[] False"),  # a command's parser, a torch-free tool: nothing heavy, nothing registered
    ("import fairseq", "", "['fairseq', 'torch'] True"),  # fairseq's --user-dir imports the package after fairseq
    ("", "from pagesum_plugin import from_pretrained", "['fairseq', 'torch'] True"),  # the hub registers
])
def test_importing_the_package_registers_with_fairseq_only_when_fairseq_is_there(before, after, expected):
    done = subprocess.run([sys.executable, "-c", IMPORTS.format(before=before, after=after)], capture_output=True,
                          text=True, timeout=300)
    assert done.stdout.strip() == expected, done.stderr
