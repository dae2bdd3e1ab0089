from .paged_summarization import PagedSummarizationTask  # noqa: F401
from .segmented_summarization import SalientExtractionTask, SegmentedSummarizationTask  # noqa: F401
