from .ngram_blocking import NoRepeatNGramBlocker, ban_repeated_ngrams  # noqa: F401
from .page_sequence_generator import PageSumSequenceGenerator  # noqa: F401
