"""The ``paged_summarization`` task: paged documents in, summaries out."""

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from fairseq import metrics
from fairseq.data import Dictionary
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II

from ..data.paged_dataset import PagedSummarizationDataset, load_paged_split
from ..generation import PageSumSequenceGenerator

logger = logging.getLogger(__name__)


@dataclass
class PagedSummarizationConfig(FairseqDataclass):
    data: str = field(default="", metadata={"help": "paged data directory written by pagesum-preprocess"})
    max_pages: Optional[int] = field(
        default=None, metadata={"help": "keep at most this many pages per example (default: all that were written)"}
    )
    max_page_tokens: int = field(
        default=1024, metadata={"help": "tokens per page, <s> and </s> included (BART has 1024 positions)"}
    )
    max_summary_tokens: int = field(
        default=1024, metadata={"help": "tokens per summary, <s> and </s> included"}
    )
    eval_rouge: bool = field(
        default=False,
        metadata={"help": "decode the validation set and log ROUGE (use with --best-checkpoint-metric rouge)"},
    )
    eval_rouge_args: str = field(
        default='{"beam": 4, "max_len_b": 256, "lenpen": 2.0, "no_repeat_ngram_size": 3}',
        metadata={"help": "generation options for --eval-rouge, as JSON"},
    )
    hypotheses_output: Optional[str] = field(
        default=None,
        metadata={
            "help": "fairseq-generate writes the detokenized best hypothesis of every example to this file, "
            "one per line, in input order (ready for pagesum-score)"
        },
    )
    page_weights_output: Optional[str] = field(
        default=None,
        metadata={"help": "fairseq-generate writes every hypothesis's per-step page weights to this JSONL file"},
    )
    top_pages: int = field(
        default=0,
        metadata={"help": "decode with only the k pages of highest confidence (0: all pages)"},
    )
    seed: int = II("common.seed")


@register_task("paged_summarization", dataclass=PagedSummarizationConfig)
class PagedSummarizationTask(FairseqTask):
    cfg: PagedSummarizationConfig

    def __init__(self, cfg: PagedSummarizationConfig, dictionary: Dictionary):
        super().__init__(cfg)
        self.dictionary = dictionary
        self._tokenizer = None
        self._page_weights_file = None
        self._hypotheses = None

    @classmethod
    def setup_task(cls, cfg: PagedSummarizationConfig, **kwargs):
        dict_path = os.path.join(cfg.data, "dict.txt")
        if not os.path.exists(dict_path):
            raise FileNotFoundError(f"{dict_path} not found: --data must be a pagesum-preprocess output directory")
        dictionary = Dictionary.load(dict_path)
        logger.info(f"dictionary: {len(dictionary)} types")
        return cls(cfg, dictionary)

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs):
        pages, page_counts, summaries = load_paged_split(self.cfg.data, split)
        self.datasets[split] = PagedSummarizationDataset(
            pages,
            page_counts,
            summaries,
            self.dictionary,
            max_pages=self.cfg.max_pages,
            max_page_tokens=self.cfg.max_page_tokens,
            max_target_tokens=self.cfg.max_summary_tokens,
            shuffle=(split == getattr(self.cfg, "train_subset", "train")),
            seed=self.cfg.seed,
        )
        logger.info(f"{split}: {len(page_counts)} examples, {int(page_counts.sum())} pages")

    def get_batch_iterator(self, dataset, required_batch_size_multiple=1, **kwargs):
        # fairseq drops a final batch whose size is not a multiple (default 8); batch
        # rows here are examples of varying page counts, so multiples buy nothing, and
        # no example may be lost.
        if required_batch_size_multiple != 1:
            logger.info("paged_summarization batches by whole examples: using --required-batch-size-multiple 1")
        return super().get_batch_iterator(dataset, required_batch_size_multiple=1, **kwargs)

    def max_positions(self):
        return (None, None)  # pages and summaries are truncated, never filtered out

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary

    # ---- generation -------------------------------------------------------------------

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        extra = dict(extra_gen_cls_kwargs or {})
        extra.setdefault("top_pages", self.cfg.top_pages)
        return super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls or PageSumSequenceGenerator, extra_gen_cls_kwargs=extra, **kwargs
        )

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        hypos = super().inference_step(generator, models, sample, prefix_tokens, constraints)
        writing = self.cfg.page_weights_output or self.cfg.hypotheses_output
        if writing and generator is not getattr(self, "_rouge_generator", None):  # not while validating
            texts = [self.detokenize(h[0]["tokens"]) for h in hypos]  # best hypothesis per example
            if self.cfg.page_weights_output:
                self._write_page_weights(sample, hypos, texts)
            if self.cfg.hypotheses_output:
                self._write_hypotheses(sample, texts)
        return hypos

    @property
    def tokenizer(self):
        """The data directory's own tokenizer, for detokenizing hypotheses."""
        if self._tokenizer is None:
            from preprocess.tokenizers import load_tokenizer

            self._tokenizer = load_tokenizer(self.cfg.data)
        return self._tokenizer

    def detokenize(self, token_ids) -> str:
        symbols = self.dictionary.string(token_ids, extra_symbols_to_ignore={self.dictionary.bos()}).split()
        return self.tokenizer.decode(symbols)

    def _write_page_weights(self, sample, hypos, texts):
        if self._page_weights_file is None:
            self._page_weights_file = open(self.cfg.page_weights_output, "w", encoding="utf-8")
        for example_id, example_hypos, text in zip(sample["id"].tolist(), hypos, texts):
            best = example_hypos[0]
            record = {
                "id": example_id,
                "hypothesis": text,
                "tokens": [self.dictionary[t] for t in best["tokens"].tolist()],
                "page_weights": [[round(w, 6) for w in row] for row in best["page_weights"].tolist()],
            }
            self._page_weights_file.write(json.dumps(record) + "\n")
        self._page_weights_file.flush()

    def _write_hypotheses(self, sample, texts):
        """Batches arrive sorted by length, not by id: buffer them and write every
        hypothesis as soon as all those before it are known."""
        if self._hypotheses is None:
            self._hypotheses = OrderedHypothesisWriter(self.cfg.hypotheses_output)
        for example_id, text in zip(sample["id"].tolist(), texts):
            self._hypotheses.add(example_id, text)

    # ---- validation by ROUGE -------------------------------------------------------------

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        if self.cfg.eval_rouge:
            gen_args = json.loads(self.cfg.eval_rouge_args)
            self._rouge_generator = self.build_generator([model], _Args(**gen_args))
        return model

    def valid_step(self, sample, model, criterion):
        loss, sample_size, logging_output = super().valid_step(sample, model, criterion)
        if self.cfg.eval_rouge:
            from evaluation.rouge import corpus_rouge

            hypos = self.inference_step(self._rouge_generator, [model], sample)
            hyp_texts = [self.detokenize(h[0]["tokens"]) for h in hypos]
            ref_texts = [self.detokenize(t[t.ne(self.dictionary.pad())]) for t in sample["target"]]
            # sums, so that batches (and workers) combine into the corpus mean
            for name, mean in corpus_rouge(hyp_texts, ref_texts, workers=1).items():
                logging_output[f"_rouge_{name}_sum"] = mean * len(hyp_texts)
            logging_output["_rouge_count"] = len(hyp_texts)
        return loss, sample_size, logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if not self.cfg.eval_rouge:
            return
        count = sum(log.get("_rouge_count", 0) for log in logging_outputs)
        if count == 0:
            return
        for name in ("rouge1", "rouge2", "rougeLsum"):
            total = sum(log.get(f"_rouge_{name}_sum", 0.0) for log in logging_outputs)
            metrics.log_scalar(name, total / count, count, round=2)
        # "rouge" is the single number for --best-checkpoint-metric: the mean of, R-Lsum
        metrics.log_derived(
            "rouge",
            lambda meters: sum(meters[n].avg for n in ("rouge1", "rouge2", "rougeLsum")) / 3,
        )


class OrderedHypothesisWriter:
    """Writes texts keyed by example index to a file in index order, streaming."""

    def __init__(self, path: str):
        self.file = open(path, "w", encoding="utf-8")
        self.pending = {}
        self.next_id = 0

    def add(self, example_id: int, text: str) -> None:
        if example_id < self.next_id or example_id in self.pending:
            raise ValueError(f"example {example_id} was decoded twice")
        self.pending[example_id] = " ".join(text.split())  # one line per example
        while self.next_id in self.pending:
            self.file.write(self.pending.pop(self.next_id) + "\n")
            self.next_id += 1
        self.file.flush()


class _Args:
    """Attribute access to generation options given as JSON (what build_generator reads)."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)
