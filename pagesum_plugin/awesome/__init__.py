"""AWESOME's derived data (Cao and Wang): what the system computes once per corpus and stores
beside it, and the commands that compute it.

* ``segmentation``: Algorithm 1, sentences into 512-768-token segments by similarity (and the
  sentence encoders it reads);
* ``targets``: every reference sentence assigned to its segment (Appendix A.2);
* ``oracle``: greedy ROUGE oracle labels for the salient-sentence extractor;
* ``cache``: the per-split files these steps write into the data directory (it owns them);
* ``segment`` / ``label`` / ``extract``: the commands that write them (``pagesum-awesome-segment``,
  ``pagesum-awesome-label``, ``pagesum-awesome-extract``).

The rest of AWESOME has the shape of every other system: ``models/awesome.py`` and
``models/extractor.py``, ``modules/memory.py``, ``data/segmented_dataset.py``,
``data/salient_content.py`` and ``data/sentence_dataset.py``,
``generation/segment_sequence_generator.py``, and the tasks ``segmented_summarization`` and
``salient_extraction``.
"""
