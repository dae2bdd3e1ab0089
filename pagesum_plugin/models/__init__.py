from .pagesum import PageSumModel  # noqa: F401
