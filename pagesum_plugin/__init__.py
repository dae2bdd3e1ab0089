"""PageSum and its rivals for fairseq: ``--user-dir pagesum_plugin`` registers

* 5 models, with their architectures:
  ``pagesum`` (``pagesum_bart_large``, ``pagesum_bart_base``, ``pagesum_tiny``),
  ``hepos`` (``hepos_bart_large``, ``hepos_bart_base``, ``hepos_tiny``),
  ``hed`` (``hed_bart_large``, ``hed_bart_base``, ``hed_tiny``),
  ``awesome`` (``awesome_bart_large``, ``awesome_bart_base``, ``awesome_tiny``) and
  ``awesome_extractor`` (``awesome_extractor_bart_large``, ``awesome_extractor_bart_base``,
  ``awesome_extractor_tiny``);
* 3 tasks: ``paged_summarization`` (every system that reads pages, a flat sequence or a
  cluster), ``segmented_summarization`` (AWESOME) and ``salient_extraction`` (AWESOME's
  extractor); the first two build the generators (``PageSumSequenceGenerator``,
  ``SegmentSequenceGenerator``);
* 2 criterions: ``paged_label_smoothed_cross_entropy`` and ``salient_extraction``;

and allows exactly the classes that fairseq checkpoints need through ``torch.load``'s
weights-only unpickler. ``from_pretrained`` loads a trained model for ``summarize()``. The
packages and what each owns: the README's Architecture section.

The console commands (``pagesum_commands``) set ``PAGESUM_TEXT_ONLY=1`` in their own process
while they import their argument parsers: the package then registers nothing (``registration``
does), so that ``--help`` imports neither torch nor fairseq. The text-only commands
(``pagesum-score``, ``pagesum-baseline``, ``pagesum-plot``, ``pagesum-decoding-flags``,
``pagesum-plan``) also do their work so; the others import ``registration`` before theirs.
"""

import os

if os.environ.get("PAGESUM_TEXT_ONLY") != "1":  # pagesum_commands.TEXT_ONLY
    from . import registration  # noqa: F401  (registers the plugin with fairseq)
    from .hub_interface import PageSumHubInterface, from_pretrained  # noqa: F401
