"""Paged preprocessing: native corpora to binarized pages for the ``paged_summarization`` task.

Data flow::

    raw corpus --readers--> Example(id, summary, units)
               --paging---> page texts (spatial | discourse | document locality)
               --tokenizers-> dictionary symbols (GPT-2 BPE | sentencepiece)
               --binarize--> DATA/{split}.pages.*, page_counts.npy, summary.*, meta.json
"""
