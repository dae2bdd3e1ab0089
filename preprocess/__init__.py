"""``pagesum-preprocess``: native corpora to the tokenized corpus that every view reads.

Data flow::

    raw corpus --readers--> Example(id, summary, units)        pagesum_plugin.corpus.readers
               --codec----> sentence units with their groups   pagesum_plugin.corpus.codec
               --binarize-> DATA/{split}.units.*, ..., meta.json   pagesum_plugin.corpus.format

Installed as the package ``pagesum_preprocess``.
"""
