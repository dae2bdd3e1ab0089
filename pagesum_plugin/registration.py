"""Importing this module registers the plugin with fairseq: its models and architectures, tasks,
criterions and optimizers, and the classes that fairseq checkpoints need through ``torch.load``'s
weights-only unpickler (first: fairseq-generate loads checkpoints). It also has fairseq's own
commands (``fairseq-train``, ``fairseq-generate``) report the plugin's mistakes in one line
(``report_mistakes``), and silences the deprecation notices fairseq's own code draws from
Hydra (``FAIRSEQ_NOTICES``).

The package's ``__init__`` imports it when fairseq is already imported (fairseq's ``--user-dir``);
``hub_interface`` imports it for ``from_pretrained``, and a console command that needs the library
whole imports it after parsing its arguments (``pagesum_commands``).
"""

import logging
import os
import sys
import warnings

from .checkpoints import safety  # noqa: F401  (first: fairseq-generate loads checkpoints)
from .criterions import paged_cross_entropy  # noqa: F401  (registers each system's criterion, task, model)
from .optim import adafactor_batched, adamw_torch  # noqa: F401
from .systems.awesome import extraction_criterion, extraction_task, extractor, model as awesome  # noqa: F401
from .systems.awesome import task as segmented_summarization  # noqa: F401
from .systems.hed import model as hed  # noqa: F401
from .systems.hepos import model as hepos  # noqa: F401
from .systems.pagesum import model as pagesum  # noqa: F401
from .tasks import paged_summarization  # noqa: F401
from .checkpoints.errors import ConversionError
from .corpus.errors import InputError
from .corpus.format import CorpusFormatError
from .errors import CheckpointError, SettingError

# Notices about fairseq's own code that a user of fairseq's commands cannot act on: fairseq composes its
# configuration with Hydra 1.0 APIs, which Hydra 1.3 warns about at every command
FAIRSEQ_NOTICES = (r"\s*The strict flag in the compose API is deprecated", r"\s*'config' is validated against ConfigStore",
                   r"\s*The version_base parameter is not specified",
                   r"\s*hydra.experimental.(initialize|compose)\(\) is no longer experimental",
                   r"\s*In 'config'. Usage of deprecated keyword in package header")
for notice in FAIRSEQ_NOTICES:
    warnings.filterwarnings("ignore", message=notice)
# Hydra's DEBUG lines ("Setting JobRuntime:name=...") at every fairseq command: one of fairseq's
# modules calls logging.basicConfig(level=DEBUG) when imported, so the console lets them through
logging.getLogger("hydra").setLevel(logging.INFO)

# The errors that say what the user must change: printed as one line, never as a traceback
MISTAKES = (SettingError, CheckpointError, InputError, CorpusFormatError, ConversionError)


def report_mistakes(hook=sys.excepthook):
    """An exception hook that prints a mistake of ``MISTAKES`` as ``command: error: what``, and
    an interruption (Ctrl-C) as one line, each leaving the exit status non-zero; anything else
    goes to ``hook``, with its traceback."""

    def report(kind, error, traceback):
        command = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
        if issubclass(kind, MISTAKES):
            print(f"{command}: error: {error}", file=sys.stderr)
        elif issubclass(kind, KeyboardInterrupt):
            print(f"{command}: interrupted", file=sys.stderr)
        else:
            hook(kind, error, traceback)

    report.reports_mistakes = True
    return report


if not getattr(sys.excepthook, "reports_mistakes", False):  # once, whoever imports the plugin first
    sys.excepthook = report_mistakes(sys.excepthook)
