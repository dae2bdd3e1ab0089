"""A training step's memory, predicted from its shapes (``model.py``), and ``pagesum-plan``
(``plan.py``), which fits each system into a budget with it. Pure arithmetic: no torch."""
