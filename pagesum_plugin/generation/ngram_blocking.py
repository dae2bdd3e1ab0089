"""--no-repeat-ngram-size that works without fairseq's CUDA extension.

fairseq's Python fallback compares the last n-1 columns of the whole token buffer,
which is still full of padding while a hypothesis grows, so on CPU it never bans
anything. This blocker looks only at the tokens generated so far, and does the
comparison for all hypotheses at once with tensor ops, none of which waits for the device.
"""

import math

import torch
from fairseq.ngram_repeat_block import NGramRepeatBlock
from torch import Tensor


class NoRepeatNGramBlocker(NGramRepeatBlock):
    """Bans every token that would complete an n-gram already present in the hypothesis."""

    def forward(self, tokens: Tensor, lprobs: Tensor, bsz: int, beam_size: int, step: int) -> Tensor:
        # tokens: (bsz*beam, max_len+2) buffer, valid up to column `step`; lprobs: (bsz*beam, vocab)
        if self.use_extension:  # the CUDA kernel already reads only the first step+1 columns
            return super().forward(tokens, lprobs, bsz, beam_size, step)
        return ban_repeated_ngrams(tokens[:, : step + 1], lprobs, self.no_repeat_ngram_size)


def ban_repeated_ngrams(history: Tensor, lprobs: Tensor, n: int) -> Tensor:
    """history: (rows, length) tokens so far; sets lprobs[row, t] = -inf where
    history[row] + [t] would end with an n-gram that history[row] already contains."""
    rows, length = history.shape
    if length < n - 1 or n < 1:
        return lprobs
    if n == 1:
        return lprobs.scatter(1, history, -math.inf)
    # windows[r, i] = history[r, i : i+n-1] for every start i that has a following token
    windows = history.unfold(1, n - 1, 1)[:, : length - n + 1]  # (rows, length-n+1, n-1)
    suffix = history[:, length - n + 1 :]  # (rows, n-1): what the next token would extend
    matches = (windows == suffix.unsqueeze(1)).all(dim=-1)  # (rows, length-n+1)
    followers = history[:, n - 1 :]  # (rows, length-n+1): the token after each window
    # count the matching windows each token follows, without asking the device how many there are
    hits = torch.zeros_like(lprobs).scatter_add_(1, followers, matches.to(lprobs.dtype))  # (rows, vocab)
    return lprobs.masked_fill_(hits > 0, -math.inf)
