"""AWESOME (Cao and Wang): divide-and-conquer summarization with memories and global
salient content, on the plugin's stored corpus.

* ``segmentation``: Algorithm 1, sentences into 512-768-token segments by similarity;
* ``targets``: every reference sentence assigned to its segment (Appendix A.2);
* ``oracle``: greedy ROUGE oracle labels for the salient-sentence extractor;
* ``salient``: a segment's input with the salient sentences of other segments (Sec. 3.2);
* ``cache``: the per-split files these steps write once into the data directory;
* ``segment`` / ``label`` / ``extract``: the commands that write them;
* ``data``: the datasets of the ``segmented_summarization`` and ``salient_extraction`` tasks;
* ``generator``: segment-by-segment beam search.
"""
