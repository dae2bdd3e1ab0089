"""PageSum (Liu et al., EMNLP 2022): a document read page by page, one prediction per page at
every step, mixed by the pages' confidences (Eq. 5-9).

* ``model.py``: the ``pagesum`` model and its architectures: the encoder that reads each page on
  its own, the decoder that decodes every page and mixes them;

and the shared layers it stands on, which the generator and the other systems use too:
``modules/page_mixing.py`` (the page layout and the confidence-weighted mixing) and
``generation/page_sequence_generator.py`` (beam search over pages, ``--top-pages``). Its views of
the corpus are the localities of the paper: ``spatial``, ``discourse``, ``document`` and ``token``
pages (``corpus/views.py``, ``--view``); the task is ``paged_summarization``
(``tasks/paged_summarization.py``); its generation defaults are the dataset's row of
``generation/defaults.py``. The equations and their tests: ``docs/systems/pagesum.md``.
"""
