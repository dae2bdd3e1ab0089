"""What every task of this plugin shares with fairseq: one dictionary, BART's, for the
source and the target."""

from fairseq.tasks import FairseqTask


class OneDictionaryTask(FairseqTask):
    """A fairseq task whose sources and targets share ``self.dictionary``."""

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary
