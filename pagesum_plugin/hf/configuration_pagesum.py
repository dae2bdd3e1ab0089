"""PageSum's configuration: BART's, plus the label smoothing of the paper's training loss."""

from huggingface_hub.dataclasses import strict
from transformers import BartConfig


@strict
class PageSumConfig(BartConfig):
    r"""
    The configuration of a [`PageSumForConditionalGeneration`]: every field of [`BartConfig`] (the encoder that
    reads each page, the decoder that runs once per page), and

    Args:
        label_smoothing (`float`, *optional*, defaults to 0.1):
            The label smoothing of the loss that `forward(labels=...)` returns (the paper's recipes train with 0.1).
        forced_eos_token_id (`int`, *optional*, defaults to `None`):
            Unlike BART's, `None`: the model's own summary rules end a summary at the length limit
            (`modeling_pagesum.SummaryRules`), keeping the score of `</s>` as the plugin's search does.
    """

    model_type = "pagesum"

    label_smoothing: float = 0.1
    forced_eos_token_id: int | list[int] | None = None


__all__ = ["PageSumConfig"]
