"""PageSum for fairseq: ``--user-dir pagesum_plugin`` registers

* task ``paged_summarization``;
* model ``pagesum`` with architectures ``pagesum_bart_large``, ``pagesum_bart_base``, ``pagesum_tiny``;
* criterion ``paged_label_smoothed_cross_entropy``;

and allows exactly the classes that fairseq checkpoints need through ``torch.load``'s
weights-only unpickler.
"""

from .checkpoints import safety  # noqa: F401  (first: fairseq-generate loads checkpoints)
from . import criterions, models, tasks  # noqa: F401
from .hub_interface import PageSumHubInterface, from_pretrained  # noqa: F401
