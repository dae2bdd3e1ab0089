"""``pagesum-preprocess``, the preprocessing pipeline: native corpora to the tokenized corpus that
every view reads. Installed as the package ``pagesum_preprocess``.

It owns the pipeline: the command and its arguments, preparing the tokenizer of a new corpus
(sentencepiece trained on the training split, or BART's files copied), the streaming,
parallel binarization (workers, chunks, a bounded number in flight, input order kept), the
statistics it prints and records, the count of what it skipped, and the data directory written
whole. What training, decoding and ``summarize()`` also need is the library's
(``pagesum_plugin.corpus``), which the pipeline imports, never the other way round::

    raw corpus --readers--> Example(id, summary, units)             pagesum_plugin.corpus.readers
               --codec----> sentence units with their groups        pagesum_plugin.corpus.codec
               --binarize-> DATA/{split}.units.*, ..., meta.json    binarize.py, with
                                                                    pagesum_plugin.corpus.format
"""
