"""AWESOME (Cao and Wang): a long document summarized segment by segment, with external
memories of what was read and written, and optionally salient sentences of the other segments.

The model, its layers and its tasks:

* ``model.py``: the ``awesome`` model and its architectures (encoder and decoder with memories);
* ``memory.py``: the attentive and compressive memories (Sec. 3.1, Eq. 1-12);
* ``task.py``: the ``segmented_summarization`` task, a training step that runs the segments in
  order, and ``summarize()``'s reading of a raw document;
* ``captured_segments.py``: that step with each segment's pass replayed from CUDA graphs
  (``--capture-training``);
* ``dataset.py`` and ``salient_content.py``: the segments of a stored corpus and the salient
  sentences put into each segment's input;
* ``generator.py``: decoding segment by segment, the memories carried across;
* ``extractor.py``, ``extraction_task.py``, ``extraction_criterion.py`` and
  ``sentence_dataset.py``: the salient-sentence extractor (``awesome_extractor``,
  ``salient_extraction``) and its data.

Its offline stages, computed once per corpus and stored beside it, and their commands:

* ``segmentation.py``: Algorithm 1, sentences into segments by similarity;
* ``targets.py``: every reference sentence assigned to its segment (Appendix A.2);
* ``oracle.py``: greedy ROUGE oracle labels for the extractor;
* ``cache.py``: the per-split files those stages write (it owns them);
* ``segment.py``, ``label.py``, ``extract.py``: ``pagesum-awesome-segment``,
  ``pagesum-awesome-label`` and ``pagesum-awesome-extract``, whose arguments are in
  ``arguments.py``.

It reads the ``segments`` view (``corpus/views.py``); its per-segment generation lengths are
``generation/defaults.py``'s ``SEGMENT_LENGTHS``. The equations and their tests:
``docs/systems/awesome.md``.
"""
