"""HED (Shen et al., 2023): BART with hierarchical encoding and decoding of a document cluster,
without new parameters.

* ``model.py``: the ``hed`` model and its architectures: document-restarted positions, the
  encoder that attends within each document (and across their SOD tokens), the decoder;
* ``attention.py``: the hierarchical self- and cross-attention (Eq. 3-5).

It reads the ``documents`` view (``corpus/views.py``) through the ``paged_summarization`` task;
its generation defaults are the dataset's row of ``generation/defaults.py`` (WCEP and
Multi-XScience have rows). The equations and their tests: ``docs/systems/hed.md``.
"""
