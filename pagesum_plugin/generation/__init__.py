import os

# In text-only mode (see pagesum_plugin/__init__.py) only the torch-free modules, such as
# ``defaults``, are imported, by name.
if os.environ.get("PAGESUM_TEXT_ONLY") != "1":
    from .ngram_blocking import NoRepeatNGramBlocker, ban_repeated_ngrams  # noqa: F401
    from .page_sequence_generator import PageSumSequenceGenerator  # noqa: F401
