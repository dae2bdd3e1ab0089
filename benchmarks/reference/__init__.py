"""The implementations of before, which the benchmarks measure the library against and the
equivalence tests compare it with: nothing in the library imports them.

* ``modules.py``: every layer of the plugin on its path from before, as a twin that shares the
  layer's parameters, buffers and children (``before(module)``), and ``reference_attention(model)``,
  which swaps the twins into a built model while a context lasts (``modules/swap.py``);
* ``search.py``: fairseq's own search loop inside the plugin's generator (``fairseq_loop``).
"""
