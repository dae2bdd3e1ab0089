from .paged_cross_entropy import PagedLabelSmoothedCrossEntropy  # noqa: F401
from .salient_extraction import SalientExtractionCriterion  # noqa: F401
