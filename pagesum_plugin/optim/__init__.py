"""The optimizers the plugin registers with fairseq: ``adamw_torch``."""

from . import adamw_torch  # noqa: F401  (registers --optimizer adamw_torch)
