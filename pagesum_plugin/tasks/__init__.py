"""The task every system but AWESOME reads its corpus with: ``paged_summarization``
(``paged_summarization.py``). AWESOME's own tasks are in ``systems/awesome/``."""
