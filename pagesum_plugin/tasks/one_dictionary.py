"""What every task of this plugin shares with fairseq: one dictionary, BART's, for the
source and the target, and data loaders made anew every epoch.

Every dataset of this plugin re-forms its batches every epoch (``data/examples.py``), so
fairseq builds a new data loader each epoch and never reuses the last one. A loader that
keeps its workers alive between epochs (fairseq's default) then keeps them until the
garbage collector finds the old loader inside fairseq's iterator objects, which refer to
one another; collected there, the queues that would tell the workers to stop are closed
first, and torch waits out its 5-second join timeout for every worker, in the middle of
whatever the training loop was doing (the first checkpoint save, usually). Loaders without
persistent workers stop theirs as soon as an epoch's batches are read.
"""

from dataclasses import dataclass, field

from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask


@dataclass
class OneDictionaryConfig(FairseqDataclass):
    persistent_workers: bool = field(
        default=False,
        metadata={"help": "keep data-loader workers between epochs (fairseq's default); this plugin's batches are "
                  "re-formed every epoch, so each epoch has a new loader and its workers are stopped at once"},
    )


class OneDictionaryTask(FairseqTask):
    """A fairseq task whose sources and targets share ``self.dictionary``."""

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary
