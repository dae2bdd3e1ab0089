from .paged_cross_entropy import PagedLabelSmoothedCrossEntropy  # noqa: F401
