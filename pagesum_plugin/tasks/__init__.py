from .paged_summarization import PagedSummarizationTask  # noqa: F401
from .segmented_summarization import SegmentedSummarizationTask  # noqa: F401
from .salient_extraction import SalientExtractionTask  # noqa: F401
