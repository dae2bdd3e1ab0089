"""The optimizers the plugin registers with fairseq: ``adamw_torch`` (``adamw_torch.py``)."""
