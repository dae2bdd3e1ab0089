"""Beam search over pages: ``page_sequence_generator.PageSumSequenceGenerator`` (the generator every
system but AWESOME decodes with), its fixed-shape and captured step (``static_search.py``), the
n-gram blocker, and the decoding defaults of every dataset (``defaults.py``, torch-free)."""
