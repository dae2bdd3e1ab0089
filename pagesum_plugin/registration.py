"""Importing this module registers the plugin with fairseq: its models and architectures, tasks,
criterions and optimizer, and the classes that fairseq checkpoints need through ``torch.load``'s
weights-only unpickler (first: fairseq-generate loads checkpoints).

The package's ``__init__`` imports it, except in text-only mode. A console command that read its
arguments in text-only mode and then needs the library whole imports it before its work
(``pagesum_commands``).
"""

from .checkpoints import safety  # noqa: F401  (first: fairseq-generate loads checkpoints)
from . import criterions, models, tasks  # noqa: F401
from . import optim  # noqa: F401  (registers --optimizer adamw_torch)
