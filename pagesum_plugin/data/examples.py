"""What fairseq's batching asks of a dataset of whole examples, shared by every dataset of
this plugin: what one example costs in a batch (``--max-tokens``), an order sorted by size
(shuffled among equal sizes when training, reseeded every epoch), and no prefetching (views
are assembled when an example is read)."""

from typing import List

import numpy as np
from fairseq.data import FairseqDataset, data_utils


class ExampleDataset(FairseqDataset):
    """Subclasses set ``example_tokens`` (n_examples,) and may sort by more keys (``sort_keys``,
    most significant last, as ``np.lexsort`` reads them)."""

    example_tokens: np.ndarray  # (n_examples,) the tokens an example costs in a batch

    @property
    def fixed_shapes(self) -> bool:
        """Whether every batch is padded to the split's limits, so that batches of one size have
        one shape (--capture-training)."""
        return False

    def __init__(self, shuffle: bool, seed: int):
        self.shuffle, self.seed, self.epoch = shuffle, seed, 1

    def sort_keys(self) -> List[np.ndarray]:
        return [self.example_tokens]

    def num_tokens(self, index: int) -> int:
        return int(self.example_tokens[index])

    def num_tokens_vec(self, indices):
        return self.example_tokens[indices]

    def ordered_indices(self):
        if self.shuffle:
            with data_utils.numpy_seed(self.seed, self.epoch):
                order = [np.random.permutation(len(self))]
        else:
            order = [np.arange(len(self))]
        return np.lexsort(order + self.sort_keys())

    def set_epoch(self, epoch):
        self.epoch = epoch

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return False

    @property
    def supports_prefetch(self):
        return False
