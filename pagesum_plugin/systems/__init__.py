"""The five systems, one folder each; a newcomer reads one folder to know one system.

* ``bart``: full-attention BART, and the base every other system's model subclasses;
* ``pagesum``: PageSum (Liu et al., EMNLP 2022), pages decoded on their own and mixed;
* ``hepos``: HEPOS (Huang et al., NAACL 2021), efficient encoder attention and head-wise strides;
* ``hed``: HED (Shen et al., 2023), hierarchical encoding and decoding of a cluster;
* ``awesome``: AWESOME (Cao and Wang), segment by segment with external memories.

Each folder's ``__init__`` says what the system holds and where the rest of it lives: the view
of the corpus it reads (``corpus/views.py``), its generation defaults (``generation/defaults.py``)
and its recipes. A system imports its own folder, ``bart`` and the shared layers below
(``modules/``, ``generation/``, ``tasks/``, ``data/``, ``corpus/``), never another system.
"""
