"""The optimizers the plugin registers with fairseq: ``adamw_torch`` (``adamw_torch.py``) and
``adafactor_batched`` (``adafactor_batched.py``)."""
