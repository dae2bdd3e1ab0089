"""PageSum's configuration: BART's, plus the label smoothing of the paper's training loss and the
chunks in which training takes it."""

from huggingface_hub.dataclasses import strict
from transformers import BartConfig

# absolute: transformers copies a saved model's code with its sibling imports only
from pagesum_plugin.architectures import LOSS_CHUNK_TOKENS


@strict
class PageSumConfig(BartConfig):
    r"""
    The configuration of a [`PageSumForConditionalGeneration`]: every field of [`BartConfig`] (the encoder that
    reads each page, the decoder that runs once per page), and

    Args:
        label_smoothing (`float`, *optional*, defaults to 0.1):
            The label smoothing of the loss that `forward(labels=...)` returns (the paper's recipes train with 0.1).
        loss_chunk_tokens (`int`, *optional*, defaults to 64, the plugin's):
            In training mode, `forward(labels=...)` projects the summaries onto the vocabulary and takes the loss
            and its gradients this many target tokens at a time, so that the logits of the whole batch never exist,
            and returns no logits; 0: the whole logits at once. In eval mode, and with fp16 weights or under an fp16
            autocast, the whole logits are computed and returned.
        forced_eos_token_id (`int`, *optional*, defaults to `None`):
            Unlike BART's, `None`: the model's own summary rules end a summary at the length limit
            (`modeling_pagesum.SummaryRules`), keeping the score of `</s>` as the plugin's search does.
    """

    model_type = "pagesum"

    label_smoothing: float = 0.1
    loss_chunk_tokens: int = LOSS_CHUNK_TOKENS
    forced_eos_token_id: int | list[int] | None = None


__all__ = ["PageSumConfig"]
