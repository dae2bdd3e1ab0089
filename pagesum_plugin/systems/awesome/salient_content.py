"""Global salient content by text concatenation (Sec. 3.2 of the AWESOME paper).

A segment's input is

    <s> Current chunk: <segment> Previous important sentences: <...> Next important sentences: <...> </s>

where the important sentences are the salient sentences of the *other* segments. They
are added outermost first, alternating: the earliest salient sentence of the past
segments, the last one of the future segments, the second earliest, the second last,
and so on, while the input stays within ``max_tokens`` (BART's 1,024 positions). A side
stops at its first sentence that does not fit; each side's header is paid with its
first sentence, and a side without sentences has no header. Within each side the
chosen sentences keep document order.
"""

from dataclasses import dataclass
from typing import List, Sequence, Tuple

import numpy as np

CURRENT_HEADER = "Current chunk:"
PREVIOUS_HEADER = " Previous important sentences:"
NEXT_HEADER = " Next important sentences:"


@dataclass(frozen=True)
class SalientHeaders:
    current: Tuple[int, ...]  # ids of "Current chunk:" (it opens the input)
    previous: Tuple[int, ...]  # ids of " Previous important sentences:"
    next: Tuple[int, ...]  # ids of " Next important sentences:"

    @classmethod
    def from_codec(cls, codec) -> "SalientHeaders":
        return cls(*(tuple(codec.ids(text).tolist()) for text in (CURRENT_HEADER, PREVIOUS_HEADER, NEXT_HEADER)))


def outermost_first(past_lengths: Sequence[int], future_lengths: Sequence[int], budget: int,
                    previous_header: int = 0, next_header: int = 0) -> Tuple[List[int], List[int]]:
    """Which past and future sentences fit in ``budget`` tokens, taken outermost first.

    Returns the chosen positions of each side, in document order."""
    past, future = [], []
    p, f = 0, len(future_lengths) - 1
    past_open, future_open = p < len(past_lengths), f >= 0
    used, turn_past = 0, True
    while past_open or future_open:
        if (turn_past and past_open) or not future_open:
            cost = past_lengths[p] + (0 if past else previous_header)
            if used + cost <= budget:
                past.append(p)
                used, p = used + cost, p + 1
                past_open = p < len(past_lengths)
            else:
                past_open = False
            turn_past = False
        else:
            cost = future_lengths[f] + (0 if future else next_header)
            if used + cost <= budget:
                future.append(f)
                used, f = used + cost, f - 1
                future_open = f >= 0
            else:
                future_open = False
            turn_past = True
    return past, future[::-1]


def augmented_input(current: np.ndarray, past: Sequence[np.ndarray], future: Sequence[np.ndarray],
                    headers: SalientHeaders, max_tokens: int, bos: int, eos: int) -> np.ndarray:
    """One segment's input ids ``<s> ... </s>`` of at most ``max_tokens`` tokens.

    current: the segment's content ids (its sentences with their leading spaces);
    past, future: the other segments' salient sentences, in document order."""
    current = np.asarray(current, dtype=np.int64)[: max(max_tokens - 2 - len(headers.current), 0)]
    budget = max_tokens - 2 - len(headers.current) - len(current)
    chosen_past, chosen_future = outermost_first([len(s) for s in past], [len(s) for s in future], budget,
                                                 len(headers.previous), len(headers.next))
    parts = [[bos], headers.current, current]
    if chosen_past:
        parts += [headers.previous] + [past[i] for i in chosen_past]
    if chosen_future:
        parts += [headers.next] + [future[i] for i in chosen_future]
    parts.append([eos])
    return np.concatenate([np.asarray(part, dtype=np.int64) for part in parts])
