"""fairseq's own search loop inside the plugin's generator: what the step loop
(``generation/search_loop.py``) is tested and benchmarked against."""

from contextlib import contextmanager
from types import MethodType
from typing import Iterator

from fairseq.sequence_generator import SequenceGenerator

from pagesum_plugin.generation.search_loop import SearchLoop


@contextmanager
def fairseq_loop(generator: SearchLoop) -> Iterator[SearchLoop]:
    """``generator``, searching with fairseq's ``SequenceGenerator._generate`` instead of its own
    loop while the context lasts; everything the generator does around the loop is unchanged."""
    generator._search = MethodType(SequenceGenerator._generate, generator)
    try:
        yield generator
    finally:
        del generator._search
