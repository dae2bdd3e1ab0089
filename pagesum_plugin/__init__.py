"""PageSum and its rivals for fairseq: ``--user-dir pagesum_plugin`` registers

* 5 models, with their architectures, one folder each under ``systems/``:
  ``pagesum`` (``pagesum_bart_large``, ``pagesum_bart_base``, ``pagesum_tiny``),
  ``hepos`` (``hepos_bart_large``, ``hepos_bart_base``, ``hepos_tiny``),
  ``hed`` (``hed_bart_large``, ``hed_bart_base``, ``hed_tiny``),
  ``awesome`` (``awesome_bart_large``, ``awesome_bart_base``, ``awesome_tiny``) and
  ``awesome_extractor`` (``awesome_extractor_bart_large``, ``awesome_extractor_bart_base``,
  ``awesome_extractor_tiny``);
* 3 tasks: ``paged_summarization`` (every system that reads pages, a flat sequence or a
  cluster), ``segmented_summarization`` (AWESOME) and ``salient_extraction`` (AWESOME's
  extractor);
* 2 criterions: ``paged_label_smoothed_cross_entropy`` and ``salient_extraction``;
* 2 optimizers: ``adamw_torch`` and ``adafactor_batched``;

and allows exactly the classes that fairseq checkpoints need through ``torch.load``'s
weights-only unpickler (``registration``).

Importing the package registers with fairseq only when fairseq is already imported: that is how
fairseq's ``--user-dir`` imports it, and then it must. Otherwise importing it, or any of its
torch-free modules, imports neither torch nor fairseq, so that a console command answers
``--help`` at once. ``from pagesum_plugin import from_pretrained`` imports the hub
(``hub_interface``), which registers the plugin itself. The packages and what each owns:
``docs/architecture.md``.
"""

import importlib
import sys

HUB = ("from_pretrained", "PageSumHubInterface")  # what the package hands out from hub_interface

if "fairseq" in sys.modules:  # fairseq's --user-dir, or a program that uses fairseq: register with it
    from . import registration  # noqa: F401


def __getattr__(name: str):
    """The hub's names (``HUB``), imported when first asked for: the hub imports torch and fairseq."""
    if name in HUB:
        return getattr(importlib.import_module(".hub_interface", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
