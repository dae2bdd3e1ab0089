"""Longest common subsequences for ROUGE-L, computed on the bits of Python integers.

rouge-score fills an (m + 1) x (n + 1) table of prefix LCS lengths in pure Python,
one cell at a time. A row of that table is non-decreasing in steps of 0 or 1, so it
is fully described by one n-bit integer whose set bits mark where the row steps up
(bit ``j - 1`` set when ``T[i][j] = T[i][j - 1] + 1``). Hyyrö's bit-vector recurrence
(a variant of Allison and Dix's) turns row ``i - 1`` into row ``i`` with four integer
operations, and Python's arbitrary-precision integers do those operations on all n
bits at once in C.

rougeLsum needs more than a length: for each reference sentence, the union of the
reference positions on one particular LCS with every hypothesis sentence, the one
that rouge-score's ``_backtrack_norec`` reads out. Its tie-breaking decides which
tokens enter the union, so ``UnionLcs`` follows the same path, and does so for all
hypothesis sentences at once:

* the hypothesis sentences sit side by side in one integer, each followed by a spare
  bit that swallows the carry of its addition, so one recurrence step advances every
  sentence's row;
* at a cell ``(i, j)`` without a match the backtrace goes up when
  ``T[i - 1][j] == T[i][j]`` and left otherwise. Going from row ``i - 1`` to row ``i``
  moves every step of the row to the left or keeps it, and adds at most one step at
  the end, so ``steps(i - 1) - steps(i)`` (with one extra step past each sentence's
  end) has exactly the columns where ``T[i][j] > T[i - 1][j]`` set;
* the backtrace therefore visits every row once: in row ``i`` it moves left to the
  first column that is a match (then diagonally up) or has ``T[i - 1][j] == T[i][j]``
  (then straight up). Finding "the first set bit to the left" for every sentence at
  once is a subtraction on the bit-reversed row, with a sentinel bit at each
  sentence's column 0 that ends its walk.

Every step is exact integer arithmetic; ``tests/test_evaluation_lcs.py`` checks the
union, position for position, against rouge-score's own functions.
"""

from typing import Dict, Hashable, List, Sequence

# Byte value -> the same byte with its bits in reverse order.
_REVERSED_BYTE = bytes(int(f"{value:08b}"[::-1], 2) for value in range(256))


def lcs_length(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Length of the longest common subsequence of two token sequences."""
    matches: Dict[Hashable, int] = {}
    for j, token in enumerate(b):
        matches[token] = matches.get(token, 0) | (1 << j)
    # Set bits of ``free`` are the columns where the current row does *not* step up.
    # Carries out of the top bit only ever touch bits above len(b), which never feed
    # back into lower ones, so they are masked once at the end instead of every step.
    free = (1 << len(b)) - 1
    for token in a:
        match = matches.get(token)
        if match is not None:
            taken = free & match
            free = (free + taken) | (free - taken)
    return len(b) - (free & ((1 << len(b)) - 1)).bit_count()


class UnionLcs:
    """rouge-score's union LCS of reference sentences against fixed hypothesis sentences.

    Built once per hypothesis; ``positions(ref)`` then answers for any reference
    sentence. Empty hypothesis sentences share nothing with any reference and are left
    out of the layout.
    """

    def __init__(self, hypothesis_sentences: Sequence[Sequence[Hashable]]):
        sentences = [s for s in hypothesis_sentences if len(s)]
        width = sum(len(s) + 1 for s in sentences)
        self._num_bytes = width // 8 + 1
        top = 8 * self._num_bytes  # reversed bit position of forward bit k: top - 1 - k

        # Forward layout: sentence c's column j (1-based) is bit offset_c + j - 1 and its
        # spare bit is offset_c + len_c. Reversed layout: column j sits at
        # top - offset_c - j, so walking left means going up, and column 0 of sentence c
        # (the end of its walk) is bit top - offset_c: the spare bit of sentence c - 1.
        self._matches: Dict[Hashable, int] = {}
        self._matches_reversed: Dict[Hashable, int] = {}
        columns = spares = column_zeros = last_columns = 0
        offset = 0
        for sentence in sentences:
            for j, token in enumerate(sentence):
                self._matches[token] = self._matches.get(token, 0) | (1 << (offset + j))
                self._matches_reversed[token] = self._matches_reversed.get(token, 0) | (1 << (top - 1 - offset - j))
            columns |= ((1 << len(sentence)) - 1) << offset
            spares |= 1 << (offset + len(sentence))
            column_zeros |= 1 << (top - offset)
            last_columns |= 1 << (top - offset - len(sentence))
            offset += len(sentence) + 1
        self._columns = columns
        self._spares = spares
        self._columns_reversed = self._reverse(columns)
        self._column_zeros = column_zeros
        self._last_columns = last_columns

    def _reverse(self, bits: int) -> int:
        return int.from_bytes(bits.to_bytes(self._num_bytes, "little").translate(_REVERSED_BYTE), "big")

    def positions(self, reference: Sequence[Hashable]) -> List[int]:
        """Positions in ``reference`` (descending) on the LCS that rouge-score's backtrace
        reads out against at least one hypothesis sentence."""
        columns, spares = self._columns, self._spares
        # Rows whose token occurs nowhere in the hypothesis equal the row above them and
        # send every backtrace straight up, so only the other rows are kept.
        rows = []
        free = columns
        steps = 0
        for i, token in enumerate(reference):
            match = self._matches.get(token)
            if match is None:
                continue
            taken = free & match
            free = ((free + taken) | (free - taken)) & columns  # each spare bit swallows its carry
            new_steps = columns ^ free
            grown = ((steps | spares) - new_steps) & columns  # columns where this row exceeds the one above
            steps = new_steps
            rows.append((i, self._reverse(grown), self._matches_reversed[token]))

        # Every sentence's backtrace starts in its last column, in the bottom row. In the
        # reversed layout a sentence's columns j, j - 1, ..., 1, 0 are consecutive bits
        # going up, so in each row its walker stops at the first bit at or above it that
        # is a match (diagonal: the row joins the union, the walk goes on from column
        # j - 1) or a column where the row equals the one above (up: same column).
        # Column 0 stops every walk for good.
        columns_reversed, column_zeros = self._columns_reversed, self._column_zeros
        column_zeros_above = column_zeros << 1
        walkers = self._last_columns  # one bit per sentence: the column its backtrace is in
        found = []
        for i, grown, match in reversed(rows):
            if walkers == column_zeros:
                break
            stops = (match | (columns_reversed ^ grown) | column_zeros) & (column_zeros_above - walkers)
            first = stops & ~(stops - walkers)  # per sentence, the lowest stop at or above its walker
            diagonal = first & match
            if diagonal:
                found.append(i)
            walkers = (diagonal << 1) | (first ^ diagonal)
        return found
