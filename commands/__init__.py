"""The console commands that read and write text only: ROUGE (``pagesum-score``), the
baselines (``pagesum-baseline``), the plots (``pagesum-plot``), the recipes' decoding flags
(``pagesum-decoding-flags``), and the memory plan (``pagesum-plan``).

Importing any module of ``pagesum_plugin`` runs the package's ``__init__``, which registers
the plugin with fairseq and so imports torch and fairseq (seconds, and fairseq's import
chatter). These commands need neither: each runs its module with the library in text-only
mode (``PAGESUM_TEXT_ONLY=1`` in this process), in which importing the package registers
nothing. Everything else (``fairseq-train --user-dir pagesum_plugin``, ``import
pagesum_plugin``, ``from pagesum_plugin import from_pretrained``) registers as before.
"""

import importlib
import os

TEXT_ONLY = "PAGESUM_TEXT_ONLY"  # read by pagesum_plugin/__init__.py

# command -> the module whose main() it runs
COMMANDS = {
    "pagesum-score": "pagesum_plugin.evaluation.score",
    "pagesum-baseline": "pagesum_plugin.evaluation.baselines",
    "pagesum-plot": "pagesum_plugin.evaluation.plots",
    "pagesum-decoding-flags": "pagesum_recipes.decoding",
    "pagesum-plan": "pagesum_plugin.memory.plan",
}


def run(command: str):
    os.environ[TEXT_ONLY] = "1"  # read once, when the package is first imported
    try:
        module = importlib.import_module(COMMANDS[command])
    finally:
        del os.environ[TEXT_ONLY]  # no child process inherits it
    return module.main()


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
