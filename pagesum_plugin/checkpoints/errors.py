"""Errors of checkpoint conversion."""


class ConversionError(ValueError):
    """A checkpoint that cannot be converted without changing what the model computes."""
