"""HEPOS (Huang et al., NAACL 2021): BART on one long flat input, with efficient encoder
self-attention and head-wise positional strides in the encoder-decoder attention.

* ``model.py``: the ``hepos`` model and its architectures, the attention of each layer chosen by
  ``--encoder-attention`` and ``--cross-attention``, BART's positions extended;
* ``attention.py``: the encoder-decoder attentions (full, HEPOS strides, Linformer) and the
  encoder's self-attention wrappers;
* ``efficient_attention.py``: the efficient encoder attentions (sliding window, LSH, Sinkhorn).

It reads the ``flat`` view (``corpus/views.py``) through the ``paged_summarization`` task; its
generation defaults are the dataset's row of ``generation/defaults.py``, or the authors' own
(``SYSTEMS``) where they decoded otherwise. The equations and their tests:
``docs/systems/hepos.md``.
"""
