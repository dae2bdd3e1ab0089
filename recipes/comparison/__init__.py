"""Every system side by side, on one corpus and one memory budget (``recipes/compare.sh``).

* ``systems``: the comparison's YAML: which systems, and how a system reads a given input
  length (Hydra overrides for training, flags for decoding);
* ``bisection``: the longest input within a budget, by bisection over input lengths;
* ``training_step``: what one training step of a system costs (peak memory, time);
* ``fit``: the fit stage, every system's longest input within the budget (``fit.json``);
* ``report``: the report stage, one table, two figures and a summary from the stages' files;
* ``figures``: the report's figures.
"""
