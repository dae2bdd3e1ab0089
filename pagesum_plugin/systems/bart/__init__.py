"""Full-attention BART, fairseq's own, and what every model of this plugin shares with it.

* ``model.py``: ``LongInputBARTModel``, BART with its encoder and decoder classes swapped, which
  PageSum, HEPOS, HED and AWESOME subclass; the decoder mixins every system decodes with
  (``SyncFreeDecoder``, ``TokenWeightsOnRequest``) and ``wrap_layer``;
* ``arguments.py``: BART's arguments from argparse or Hydra (``as_bart_args``) and the ``*_tiny``
  shape.

As a system, full-attention BART reads one flat sequence (``--view flat``) and runs as the hepos
model with both attentions full (``recipes/config/bart_full_attention.yaml``), which is
fairseq's BART exactly (``tests/test_hepos_attention.py``); its generation defaults are the
dataset's row of ``generation/defaults.py``.
"""
