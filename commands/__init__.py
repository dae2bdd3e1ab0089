"""The console commands that answer ``--help`` at once: each reads its arguments with a parser
built by a module that imports nothing heavy, and only then imports the module that does its
work.

Importing ``pagesum_plugin`` or a torch-free module of it imports neither torch nor fairseq
(the package registers with fairseq only when fairseq is already imported), so ``--help`` and a
usage error exit having imported no torch, fairseq, NLTK, scipy, scikit-learn, matplotlib or
``transformers``. Then:

* a text-only command (``pagesum-score``, ``pagesum-baseline``, ``pagesum-plot``,
  ``pagesum-decoding-flags``, ``pagesum-plan``) does its work without torch or fairseq;
* every other command registers the plugin with fairseq (``pagesum_plugin.registration``,
  quietly) before it imports the module that does its work.

The work module's ``main()`` parses the same command line again with the same parser (a
millisecond), so that calling ``main(argv)`` from Python behaves exactly as the command does.
"""

import importlib
import logging
from dataclasses import dataclass

REGISTRATION = "pagesum_plugin.registration"


@dataclass(frozen=True)
class Command:
    parser: str  # "module:function" that builds the command's parser, importing nothing heavy
    work: str  # the module whose main() runs the command
    text_only: bool = False  # True: the work needs neither torch nor fairseq, and imports neither


COMMANDS = {
    "pagesum-score": Command("pagesum_plugin.evaluation.arguments:score_parser", "pagesum_plugin.evaluation.score",
                             text_only=True),
    "pagesum-baseline": Command("pagesum_plugin.evaluation.arguments:baseline_parser",
                                "pagesum_plugin.evaluation.baselines", text_only=True),
    "pagesum-plot": Command("pagesum_plugin.evaluation.arguments:plot_parser", "pagesum_plugin.evaluation.plots",
                            text_only=True),
    "pagesum-decoding-flags": Command("pagesum_recipes.decoding:build_parser", "pagesum_recipes.decoding",
                                      text_only=True),
    "pagesum-plan": Command("pagesum_plugin.memory.plan:build_parser", "pagesum_plugin.memory.plan", text_only=True),
    "pagesum-preprocess": Command("pagesum_preprocess.arguments:build_parser", "pagesum_preprocess.cli"),
    "pagesum-convert": Command("pagesum_plugin.checkpoints.arguments:convert_parser",
                               "pagesum_plugin.checkpoints.convert"),
    "pagesum-awesome-segment": Command("pagesum_plugin.systems.awesome.arguments:segment_parser",
                                       "pagesum_plugin.systems.awesome.segment"),
    "pagesum-awesome-label": Command("pagesum_plugin.systems.awesome.arguments:label_parser", "pagesum_plugin.systems.awesome.label"),
    "pagesum-awesome-extract": Command("pagesum_plugin.systems.awesome.arguments:extract_parser",
                                       "pagesum_plugin.systems.awesome.extract"),
    "pagesum-compare-fit": Command("pagesum_recipes.arguments:fit_parser", "pagesum_recipes.comparison.fit"),
    "pagesum-compare-report": Command("pagesum_recipes.arguments:report_parser", "pagesum_recipes.comparison.report"),
    "pagesum-make-figures": Command("pagesum_recipes.arguments:figures_parser", "pagesum_recipes.make_figures"),
    "pagesum-demo-data": Command("pagesum_recipes.arguments:demo_data_parser", "pagesum_recipes.demo_data",
                                 text_only=True),
    "pagesum-demo-report": Command("pagesum_recipes.arguments:demo_report_parser", "pagesum_recipes.demo_report",
                                   text_only=True),
}


def run(name: str):
    """Run command ``name`` on ``sys.argv``: parse, then import its work and run its ``main()``."""
    command = COMMANDS[name]
    module, function = command.parser.split(":")
    getattr(importlib.import_module(module), function)().parse_args()  # --help and usage errors exit here
    if not command.text_only:
        register_quietly()
    return importlib.import_module(command.work).main()


def register_quietly():
    """Register the plugin with fairseq (as ``import pagesum_plugin`` does) without fairseq's import
    side effects on the console. One of fairseq's model modules calls ``logging.basicConfig(level=DEBUG)``
    when it is imported: that would give this process a DEBUG console handler before the command sets
    up its own logging (which then does nothing), print the text-to-speech task's "Please install
    tensorboardX" line, and let every library log at DEBUG. While the registration imports fairseq,
    the root logger holds a handler that writes nothing, so that ``basicConfig`` leaves it alone and
    records below the root's level (WARNING) are dropped."""
    root, silent = logging.getLogger(), logging.NullHandler()
    root.addHandler(silent)
    try:
        importlib.import_module(REGISTRATION)
    finally:
        root.removeHandler(silent)


def score():
    return run("pagesum-score")


def baseline():
    return run("pagesum-baseline")


def plot():
    return run("pagesum-plot")


def decoding_flags():
    return run("pagesum-decoding-flags")


def plan():
    return run("pagesum-plan")


def preprocess():
    return run("pagesum-preprocess")


def convert():
    return run("pagesum-convert")


def awesome_segment():
    return run("pagesum-awesome-segment")


def awesome_label():
    return run("pagesum-awesome-label")


def awesome_extract():
    return run("pagesum-awesome-extract")


def compare_fit():
    return run("pagesum-compare-fit")


def compare_report():
    return run("pagesum-compare-report")


def make_figures():
    return run("pagesum-make-figures")


def demo_data():
    return run("pagesum-demo-data")


def demo_report():
    return run("pagesum-demo-report")
