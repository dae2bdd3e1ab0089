"""AWESOME's summarization task, ``segmented_summarization``: the ``paged_summarization`` task
on the ``segments`` view, with the segments cut by Algorithm 1 and every segment's own target
(both cached by ``pagesum-awesome-segment``), optionally the salient sentences of the other
segments in every segment's input (``--salient-sentences``). A training step runs the segments
of a batch in order, carrying the memories from one to the next with stopped gradients, and
back-propagates each segment's loss before the next segment runs, so the peak memory of a step
does not grow with the number of segments; with ``--capture-training``, each segment's pass is
replayed from CUDA graphs (``captured_segments.py``). Decoding is segment by segment too
(``systems/awesome/generator.py``), with the per-segment generation defaults. For
``summarize()``, the task reads a raw document as the training data was read: segmented the same
way, with the salient sentences given or picked by a trained extractor (loaded once per path).
The extractor trains on its own task, ``salient_extraction`` (``systems/awesome/extraction_task.py``).
"""

import contextlib
import logging
import os
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Union

import numpy as np
import torch
from fairseq import metrics
from fairseq.data import Dictionary
from fairseq.dataclass import ChoiceEnum
from fairseq.optim.amp_optimizer import AMPOptimizer
from fairseq.tasks import register_task

from .cache import load_salient, load_segmentation, segmentation_settings
from . import segmentation as algorithm_1  # AWESOME's Algorithm 1 and its settings
from ...corpus.codec import unit_texts
from ...corpus.format import EncodedDocument
from ...corpus.storage import CorpusSplit
from ...corpus.views import ViewConfig
from ...errors import SettingError
from .salient_content import SalientHeaders
from .captured_segments import CapturedSegments, batch_logging_output
from .dataset import SegmentedSummarizationDataset, segment_inputs
from .generator import SegmentSequenceGenerator
from .memory import SegmentMemory
from ...modules.page_mixing import real_pages
from ...tasks.paged_summarization import PagedSummarizationConfig, PagedSummarizationTask
from .extraction_task import SalientExtractor

logger = logging.getLogger(__name__)

SALIENT_CHOICES = ChoiceEnum(["none", "oracle", "extractor"])
# paged_summarization's page-view settings: the segments view reads none of them
PAGE_VIEW_SETTINGS = ("num_pages", "max_pages", "spatial_split", "placeholder_pages", "max_page_tokens",
                      "max_source_tokens")


@dataclass
class SegmentedSummarizationConfig(PagedSummarizationConfig):
    segmentation: str = field(
        default=algorithm_1.model_tag(algorithm_1.DEFAULT_EMBEDDING_MODEL),
        metadata={"help": "the cached segmentation to read: the tag that `pagesum-awesome-segment` "
                  "printed (the embedding model's name, or 'length' for the length rule alone)"},
    )
    salient_sentences: SALIENT_CHOICES = field(
        default="none",
        metadata={"help": "global salient content by text concatenation: the salient sentences of the other "
                  "segments from the greedy ROUGE oracle, or from the trained extractor (none: segments alone)"},
    )
    max_input_tokens: int = field(
        default=1024, metadata={"help": "tokens of a segment's input with its salient sentences, specials included"}
    )
    max_document_tokens: Optional[int] = field(
        default=None, metadata={"help": "keep a document's leading segments while they hold at most this many "
                                "tokens (the paper trains on up to 51,200)"}
    )


@register_task("segmented_summarization", dataclass=SegmentedSummarizationConfig)
class SegmentedSummarizationTask(PagedSummarizationTask):
    cfg: SegmentedSummarizationConfig
    segment_by_segment = True  # document_inputs() below; decoding settings apply to every segment

    def __init__(self, cfg: SegmentedSummarizationConfig, dictionary: Dictionary, meta):
        given = ([f"--view {cfg.view}"] if cfg.view not in (None, "segments") else []) + [
            f"--{name.replace('_', '-')}" for name in PAGE_VIEW_SETTINGS if getattr(cfg, name) not in (None, False)]
        if given:
            raise SettingError(f"segmented_summarization reads the segments that pagesum-awesome-segment cut "
                               f"(--segmentation), not pages: {', '.join(given)} would be ignored (a segment's "
                               f"input is cut by --max-input-tokens)")
        super().__init__(cfg, dictionary, meta)
        self.view = ViewConfig(view="segments", max_segment_tokens=algorithm_1.MAX_TOKENS + 2)
        self._encoder = None  # the sentence embedding model, loaded when a raw document needs it
        self.extractors: Dict[str, SalientExtractor] = {}  # extractor checkpoints summarize() loaded, by path

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs):
        corpus = CorpusSplit(self.cfg.data, split)
        training = split == getattr(self.cfg, "train_subset", "train")
        num_units = len(corpus.structure.unit_length)
        segment_ids, targets = load_segmentation(self.cfg.data, split, self.cfg.segmentation, num_units)
        settings = segmentation_settings(self.cfg.data, split, self.cfg.segmentation)
        max_tokens = settings.get("max_tokens", algorithm_1.MAX_TOKENS)
        self.view = ViewConfig(view="segments", max_segment_tokens=max_tokens + 2)
        salient, headers = None, None
        if self.cfg.salient_sentences != "none":
            salient = load_salient(self.cfg.data, split, self.cfg.salient_sentences, num_units)
            headers = SalientHeaders.from_codec(self.codec)
        dataset = SegmentedSummarizationDataset(
            corpus, self.view, self.dictionary, segment_ids, targets, salient, headers,
            max_input_tokens=self.cfg.max_input_tokens, max_summary_tokens=self.max_summary_tokens,
            max_document_tokens=self.cfg.max_document_tokens, shuffle=training, seed=self.cfg.seed,
            fixed_shapes=training and self.cfg.capture_training,  # one shape to capture
        )
        self.datasets[split] = dataset
        logger.info(f"{split}: {len(dataset)} examples, {int(dataset.segment_counts.sum())} segments "
                    f"(segmentation {self.cfg.segmentation}, salient sentences: {self.cfg.salient_sentences})")

    # ---- one segment at a time ------------------------------------------------------------

    def segment_steps(self, sample: Dict, memory: SegmentMemory) -> Iterator[Dict]:
        """The batch's segments in order, each a sample for the criterion of the documents
        that have it; ``memory`` keeps the same documents, in the same order."""
        pad = self.dictionary.pad()
        src_tokens = sample["net_input"]["src_tokens"]  # (batch, max_segments, seg_len)
        segment_counts = real_pages(src_tokens, pad).sum(dim=1)  # (batch,)
        active = torch.arange(src_tokens.size(0), device=src_tokens.device)
        for t in range(int(segment_counts.max())):
            still = segment_counts.index_select(0, active) > t
            if not bool(still.all()):
                memory.select(still.nonzero(as_tuple=True)[0])
                active = active[still]
            source = _trim(src_tokens[active, t], pad)  # (rows, seg_len)
            target = _trim(sample["segment_target"][active, t], pad)  # (rows, tgt_len): <s> ... </s>
            prev = sample["segment_prev_output_tokens"][active, t][:, : target.size(1)].contiguous()  # </s> <s> ...
            yield {
                "id": sample["id"][active],
                "nsentences": len(active),
                "ntokens": int(target.ne(pad).sum()),
                "net_input": {"src_tokens": source, "src_lengths": source.ne(pad).sum(dim=1),
                              "prev_output_tokens": prev, "memory": memory},
                "target": target,
            }

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        model.train()
        model.set_num_updates(update_num)
        if self.cfg.capture_training and self._captured is None:
            self._captured = CapturedSegments(criterion, eager=self.train_segments)
        with self.first_update_timed():
            if self._captured is None:
                return self.train_segments(sample, model, criterion, optimizer, ignore_grad)
            return self._captured.train_step(model, sample, optimizer, ignore_grad)

    def train_segments(self, sample, model, criterion, optimizer, ignore_grad):
        """The eager step: the segments in order, each back-propagated before the next runs."""
        memory = SegmentMemory()
        autocast = torch.autocast("cuda") if isinstance(optimizer, AMPOptimizer) else contextlib.nullcontext()
        total, logs = None, []
        for step in self.segment_steps(sample, memory):
            with torch.autograd.profiler.record_function("forward"), autocast:
                loss, sample_size, logging_output = criterion(model, step)
            if ignore_grad:
                loss *= 0
            with torch.autograd.profiler.record_function("backward"):
                optimizer.backward(loss)  # this segment's graph is freed before the next one is built
            total = loss.detach() if total is None else total + loss.detach()
            logs.append(logging_output)
        merged = batch_logging_output(logs, sample)
        return total, merged["sample_size"], merged

    def valid_step(self, sample, model, criterion):
        model.eval()
        memory = SegmentMemory()
        with torch.no_grad():
            results = [criterion(model, step) for step in self.segment_steps(sample, memory)]
        total = sum(loss for loss, _, _ in results)
        logging_output = batch_logging_output([log for _, _, log in results], sample)
        if self.cfg.eval_rouge:
            logging_output.update(self.validation_rouge(sample, model))
        return total, logging_output["sample_size"], logging_output

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        documents = sum(log.get("ndocuments", 0) for log in logging_outputs)
        if documents:
            segments = sum(log.get("nsegments", 0) for log in logging_outputs)
            metrics.log_scalar("segments_per_doc", segments / documents, documents, round=2)

    # ---- generation ---------------------------------------------------------------------

    sequence_generator_cls = SegmentSequenceGenerator

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        return super().build_generator(models, args, seq_gen_cls=seq_gen_cls or self.sequence_generator_cls,
                                       extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs)

    def document_inputs(self, document: EncodedDocument, salient: Optional[np.ndarray] = None) -> List[np.ndarray]:
        """The segment inputs of a document given as text (``summarize()``): segmented as the
        training data was (Algorithm 1 with the same embedding model and lengths, or the
        length rule when the model cannot be loaded here), with the salient sentences
        ``salient`` (per-unit bool) when the model was trained with them."""
        settings = self._segmentation_settings()
        embeddings = None
        encode = self._sentence_encoder(settings)
        if encode is not None:  # rounded as the segment command's cache stores them
            embeddings = np.asarray(encode(unit_texts(self.codec, document))).astype(np.float16).astype(np.float32)
        max_tokens = settings.get("max_tokens", algorithm_1.MAX_TOKENS)
        streams = algorithm_1.segment_example(document, embeddings, settings.get("min_tokens", algorithm_1.MIN_TOKENS), max_tokens)
        headers = SalientHeaders.from_codec(self.codec) if salient is not None else None
        view = ViewConfig(view="segments", max_segment_tokens=max_tokens + 2)
        return segment_inputs(document, streams, view, self.dictionary.bos(), self.dictionary.eos(), salient,
                              headers, self.cfg.max_input_tokens)

    # ---- salient sentences of a raw document (summarize()) -------------------------------

    @property
    def salient_source(self) -> str:
        """Where the model's salient sentences came from in training: none, oracle or extractor."""
        return str(self.cfg.salient_sentences)

    def salient_labels(self, document_ids: EncodedDocument, salient: Optional[Sequence[Union[bool, int]]] = None, extractor=None,
                       device=None) -> Optional[np.ndarray]:
        """(n_sentences,) bool of an encoded document, or None for a model without salient
        sentences: the labels given, or the extractor's (run on ``device``)."""
        source = self.salient_source
        if source == "none":
            if salient is not None or extractor is not None:
                raise ValueError("this model was trained without salient sentences (--salient-sentences none): "
                                 "pass neither salient= nor extractor=")
            return None
        if salient is not None and extractor is not None:
            raise ValueError("pass salient= or extractor=, not both")
        count = len(document_ids.unit_length)
        if salient is not None:
            labels = np.asarray(salient).astype(bool)
            if labels.shape != (count,):
                raise ValueError(f"salient= gives {labels.size} labels for a document of {count} sentences: "
                                 f"one per sentence of sentences(document)")
            return labels
        if extractor is None:
            raise ValueError(f"this model reads salient sentences (--salient-sentences {source}): pass "
                             f"extractor='EXTRACTOR.pt' (a fairseq-train --task salient_extraction checkpoint) or "
                             f"salient=[one 0/1 label per sentence of sentences(document)] for every document")
        return self.salient_extractor(extractor, device).predict(document_ids)

    def salient_extractor(self, extractor, device=None) -> SalientExtractor:
        """A ``SalientExtractor``: the one given, or the checkpoint at that path, read with this
        corpus's dictionary and loaded once, on ``device``."""
        if hasattr(extractor, "predict"):
            return extractor
        path = os.fspath(extractor)
        if path not in self.extractors:
            self.extractors[path] = SalientExtractor.from_checkpoint(path, self.cfg.data).to(device or "cpu")
        return self.extractors[path]

    def _segmentation_settings(self) -> dict:
        for split in self.meta.splits or ["train"]:
            settings = segmentation_settings(self.cfg.data, split, self.cfg.segmentation)
            if settings:
                return settings
        return {}

    def _sentence_encoder(self, settings: dict):
        name = settings.get("embedding_model", algorithm_1.LENGTH_RULE)
        if name == algorithm_1.LENGTH_RULE:
            return None
        if self._encoder is None:
            self._encoder = algorithm_1.sentence_encoder_or_length_rule(name, logger.warning) or False  # False: tried
        return self._encoder or None


def _trim(tokens: torch.Tensor, pad: int) -> torch.Tensor:
    """(rows, len) right-padded -> without the columns that are padding in every row."""
    return tokens[:, : int(tokens.ne(pad).sum(dim=1).max())].contiguous()

