"""The criterion every system but AWESOME's extractor trains with:
``paged_label_smoothed_cross_entropy`` (``paged_cross_entropy.py``)."""
