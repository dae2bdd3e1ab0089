from .paged_summarization import PagedSummarizationTask  # noqa: F401
