"""The ``paged_summarization`` task: a stored corpus read through a view, summaries out.

The corpus (``pagesum-preprocess``) holds sentence units; ``--view`` and the page sizes
choose how they become pages, defaulting to the view recorded in the corpus's metadata.
"""

import argparse
import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass, field, fields, replace
from typing import Dict, Optional

from fairseq import metrics
from fairseq.dataclass import ChoiceEnum
from fairseq.data import Dictionary
from fairseq.tasks import register_task
from omegaconf import II

from ..corpus.codec import TextCodec
from ..criterions.paged_cross_entropy import PagedLabelSmoothedCrossEntropy
from ..corpus.format import CorpusMeta
from ..corpus.storage import CorpusSplit, load_dictionary
from ..corpus.readers import PLACEHOLDER_PAGE
from ..corpus.views import VIEWS, ViewConfig
from ..data.paged_dataset import PagedSummarizationDataset
from ..errors import SettingError, check_checkpoint_file
from ..evaluation.rouge import corpus_rouge
from ..generation.page_sequence_generator import PageSumSequenceGenerator
from ..generation.contract import model_name
from ..generation.defaults import GenerationDefaults, check_settings, for_dataset
from ..generation.outputs import InputOrderFile, page_weights_record
from ..modules.compiled_layers import compile_model_layers
from ..training_capture import CapturedTraining
from .one_dictionary import OneDictionaryConfig, OneDictionaryTask

logger = logging.getLogger(__name__)

ROUGE_METRICS = ("rouge1", "rouge2", "rougeLsum")
LABELS = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeLsum": "ROUGE-Lsum"}


COMPILE_LAYERS_CHOICES = ChoiceEnum(["auto", "on", "off"])
SEARCH_FLAGS = ("beam", "lenpen", "min_len", "max_len_b", "no_repeat_ngram_size")  # fairseq's, read by the search


def flag(setting: str, value) -> str:
    """A setting as typed on the command line: ``--top-pages -1``."""
    return f"--{setting.replace('_', '-')} {value}"


def check_output_file(option: str, path: Optional[str]) -> None:
    """Refuse, before any model is loaded, an output file that could not be written once the
    split is decoded: a folder, or a file in a folder that does not exist."""
    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise SettingError(f"{option} {path}: a folder; name a file to write")
    if not os.path.isdir(folder):
        raise SettingError(f"{option} {path}: no folder {folder} to write it in; create it first")


def given_or_stored(given: Optional[int], stored: Optional[int], option: str, least: int) -> Optional[int]:
    """A size setting: the one given on the command line, else the corpus's (meta.json); a
    given one below ``least`` is refused, naming the flag (``option``)."""
    if given is None:
        return stored
    if given < least:
        raise SettingError(f"{option} {given}: must be at least {least} (leave it out for the corpus's own, "
                           f"{stored})")
    return given


@dataclass
class PagedSummarizationConfig(OneDictionaryConfig):
    data: str = field(default="", metadata={"help": "data directory written by pagesum-preprocess"})
    view: Optional[str] = field(
        default=None, metadata={"help": f"how pages are made: {', '.join(VIEWS)} (default: the corpus's own)"}
    )
    num_pages: Optional[int] = field(default=None, metadata={"help": "spatial, token: pages per example"})
    max_pages: Optional[int] = field(default=None, metadata={"help": "discourse, document: at most this many pages"})
    spatial_split: Optional[str] = field(
        default=None, metadata={"help": "spatial: 'authors' (n // k sentences per page, the rest on the last; "
                                "the released code's rule) or 'even' (sizes differ by at most one)"}
    )
    placeholder_pages: bool = field(
        default=False,
        metadata={"help": "page views: always feed exactly the page limit of pages, filling missing ones with "
                  "'.' pages that take part in the page softmax (the authors' code); default: they are absent"},
    )
    max_page_tokens: Optional[int] = field(
        default=None, metadata={"help": "tokens per page, <s> and </s> included (BART has 1024 positions)"}
    )
    max_source_tokens: Optional[int] = field(
        default=None, metadata={"help": "flat, documents: tokens of the whole input, specials included"}
    )
    max_summary_tokens: Optional[int] = field(
        default=None, metadata={"help": "tokens per summary, <s> and </s> included"}
    )
    eval_rouge: bool = field(
        default=False,
        metadata={"help": "decode the validation set and log ROUGE (use with --best-checkpoint-metric rouge)"},
    )
    eval_rouge_args: str = field(
        default="{}",
        metadata={"help": "settings of the validation search over the dataset's generation defaults, as a JSON "
                          "object of beam, lenpen, no_repeat_ngram_size, min_len, max_len_b and top_pages"},
    )
    hypotheses_output: Optional[str] = field(
        default=None,
        metadata={
            "help": "fairseq-generate writes the best hypothesis of every example to this file, "
            "one per line, in input order (ready for pagesum-score)"
        },
    )
    page_weights_output: Optional[str] = field(
        default=None,
        metadata={"help": "fairseq-generate writes every best hypothesis's per-step page weights to this "
                  "JSONL file, in input order, keyed by the input's example id"},
    )
    top_pages: int = field(
        default=0,
        metadata={"help": "decode with only the k pages of highest confidence (0: all pages); summarize() "
                  "reads it too"},
    )
    compile_decoder: bool = field(
        default=False,
        metadata={"help": "decode with every decoder layer compiled by torch.compile (the first batch pays the "
                  "compilation; on CUDA it opens CUDA graphs); summarize(compile=True) is the same"},
    )
    eager_decoding: bool = field(
        default=False,
        metadata={"help": "run every decoding step operator by operator (the step loop), not as one captured CUDA "
                  "graph per step, which is the default on CUDA; summarize(decoding='eager') is the same"},
    )
    patient_search: bool = field(
        default=False,
        metadata={"help": "stop each example's beam search as transformers' generate(early_stopping=False) does, "
                  "as the PageSum authors decoded their test sets: later, better ended hypotheses replace the "
                  "worst of the beam kept, until none can (step by step, not captured); default: at the first "
                  "beam ended, as fairseq; summarize(patient=True) is the same"},
    )
    compile_layers: COMPILE_LAYERS_CHOICES = field(
        default="auto",
        metadata={"help": "train with every encoder and decoder layer compiled by torch.compile, each stack sharing "
                  "one set of graphs (modules/compiled_layers.py), and the loss's chunk too (one graph for every "
                  "chunk): on, off, or auto (on when the model is on CUDA); the first update pays the compilation, "
                  "and its time is logged"},
    )
    capture_training: bool = field(
        default=False,
        metadata={"help": "on CUDA, capture each batch shape's forward pass and loss, and its backward, as CUDA graphs "
                  "and replay them (training_capture.py); training batches are padded to the split's most pages, "
                  "longest page and longest summary, so that batches of one --batch-size have one shape; the update "
                  "stays eager"},
    )
    checkpoint_paths: Optional[str] = II("common_eval.path")  # fairseq-generate's --path, checked before loading
    seed: int = II("common.seed")
    gen_subset: str = II("dataset.gen_subset")  # the split whose outputs fairseq-generate writes


@register_task("paged_summarization", dataclass=PagedSummarizationConfig)
class PagedSummarizationTask(OneDictionaryTask):
    cfg: PagedSummarizationConfig
    # A segment-by-segment task (AWESOME) reads a raw document with its own document_inputs() and
    # decodes with the per-segment lengths; this one reads pages of a view
    segment_by_segment = False

    def __init__(self, cfg: PagedSummarizationConfig, dictionary: Dictionary, meta: CorpusMeta):
        super().__init__(cfg)
        self.dictionary = dictionary
        self.meta = meta
        self._codec = None
        sizes = dict(
            num_pages=given_or_stored(cfg.num_pages, meta.num_pages, "--num-pages", least=1),
            max_pages=given_or_stored(cfg.max_pages, meta.max_pages, "--max-pages", least=1),
            max_page_tokens=given_or_stored(cfg.max_page_tokens, meta.max_page_tokens, "--max-page-tokens", least=3),
            max_source_tokens=given_or_stored(cfg.max_source_tokens, meta.max_source_tokens, "--max-source-tokens",
                                              least=3),
        )
        try:
            self.view = ViewConfig(
                view=cfg.view or meta.view, spatial_split=cfg.spatial_split or meta.spatial_split,
                placeholder=tuple(self.codec.ids(PLACEHOLDER_PAGE).tolist()) if cfg.placeholder_pages else (), **sizes,
            )
        except ValueError as error:  # an unknown view or split, placeholder pages on a view without a page limit
            raise SettingError(f"{error} (--view, --spatial-split, --placeholder-pages)") from None
        self.max_summary_tokens = given_or_stored(cfg.max_summary_tokens, meta.max_summary_tokens,
                                                  "--max-summary-tokens", least=3)
        self.generation_defaults = self.decoding_defaults()  # the model's own row once it is built
        check_settings({"top_pages": cfg.top_pages}, flag)
        self.validation_decoding()  # --eval-rouge-args: refused when given with a mistake, read or not
        check_output_file("--hypotheses-output", cfg.hypotheses_output)
        check_output_file("--page-weights-output", cfg.page_weights_output)
        self._outputs = {}
        self._hypotheses: Dict[int, str] = {}  # fairseq-generate's best hypotheses so far, by input index
        self._rouge_generator = None
        self._first_update: Optional[float] = None  # when the layers were compiled: the first update is timed
        # --capture-training's graphs, once the first update runs
        self._captured: Optional[CapturedTraining] = None

    def decoding_defaults(self, system: str = "") -> GenerationDefaults:
        """Every decoding setting of this task for the registered model ``system``: its dataset's
        row (the system's own where a rival's authors decoded the dataset otherwise), per segment
        for a segment-by-segment task, with the task's --top-pages."""
        return replace(for_dataset(self.meta.dataset, system, per_segment=self.segment_by_segment),
                       top_pages=self.cfg.top_pages)

    @classmethod
    def setup_task(cls, cfg: PagedSummarizationConfig, **kwargs):
        paths = getattr(cfg, "checkpoint_paths", None) or ""
        if not paths.startswith("${"):  # a config built without fairseq's whole one leaves the reference unresolved
            for path in filter(None, paths.split(os.pathsep)):  # fairseq-generate --path: refused in one line
                check_checkpoint_file(path)
        meta = CorpusMeta.load(cfg.data)
        dictionary = load_dictionary(cfg.data)
        logger.info(f"dictionary: {len(dictionary)} types")
        return cls(cfg, dictionary, meta)

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs):
        corpus = CorpusSplit(self.cfg.data, split)
        training = split == getattr(self.cfg, "train_subset", "train")
        dataset = PagedSummarizationDataset(
            corpus, self.view, self.dictionary, self.max_summary_tokens, shuffle=training, seed=self.cfg.seed,
            fixed_shapes=training and self.cfg.capture_training,  # one shape to capture
        )
        self.datasets[split] = dataset
        logger.info(f"{split}: {len(dataset)} examples, {int(dataset.page_counts.sum())} pages ({self.view.view} view)")

    def get_batch_iterator(self, dataset, required_batch_size_multiple=1, **kwargs):
        # fairseq drops a final batch whose size is not a multiple (default 8); batch
        # rows here are examples of varying page counts, so multiples buy nothing, and
        # no example may be lost.
        if required_batch_size_multiple != 1:
            logger.info("paged_summarization batches by whole examples: using --required-batch-size-multiple 1")
        if getattr(dataset, "fixed_shapes", False) and kwargs.get("max_tokens") is not None:
            logger.warning("--capture-training with --max-tokens: batches by tokens vary in size, and every size is a "
                           "shape to capture; give --batch-size alone")
        return super().get_batch_iterator(dataset, required_batch_size_multiple=1, **kwargs)

    def max_positions(self):
        return (None, None)  # pages and summaries are truncated, never filtered out

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        """fairseq's filter of the examples longer than the model's positions, its refusal in one
        line that names the setting which cuts them to fit (fairseq's advises to skip them)."""
        indices, ignored = dataset.filter_indices_by_size(indices, max_positions)
        if len(ignored) and not ignore_invalid_inputs:
            page, summary = dataset.size(ignored[0])
            cut = {"flat": "--max-source-tokens", "documents": "--max-source-tokens",
                   "segments": "--max-input-tokens"}.get(self.view.view, "--max-page-tokens")
            raise SettingError(f"{len(ignored)} examples do not fit the model's (source, summary) positions "
                               f"{tuple(max_positions)}, the first (#{ignored[0]}) a page of {page} and a summary of "
                               f"{summary} tokens: cut them to fit with {cut} and --max-summary-tokens "
                               f"(--skip-invalid-size-inputs-valid-test skips them)")
        if len(ignored):
            logger.warning(f"{len(ignored):,} examples longer than the model's positions {tuple(max_positions)} "
                           f"skipped (--skip-invalid-size-inputs-valid-test), the first ids {list(ignored[:10])}")
        return indices

    # ---- training ---------------------------------------------------------------------

    def begin_epoch(self, epoch, model):
        """Before the first epoch, compile the model's layers for training where
        ``--compile-layers`` says so (the model fairseq-train built, before its first update);
        ``train_step`` compiles the criterion's loss chunk then."""
        super().begin_epoch(epoch, model)
        setting = str(self.cfg.compile_layers)
        on_cuda = next(model.parameters()).is_cuda
        if self._first_update is None and (setting == "on" or (setting == "auto" and on_cuda)):
            compiled = compile_model_layers(model)
            if compiled:
                logger.info(f"--compile-layers {setting}: {compiled} layers compiled by torch.compile (inductor), "
                            "each stack sharing its graphs; the first update compiles them")
                self._first_update = 0.0

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        if self._first_update == 0.0 and isinstance(criterion, PagedLabelSmoothedCrossEntropy):
            criterion.compile_chunks()  # the loss's chunks compile with the layers, in the first update
        if self.cfg.capture_training and self._captured is None:
            self._captured = CapturedTraining(criterion)
        with self.first_update_timed():
            if self._captured is None:
                return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)
            model.train()
            model.set_num_updates(update_num)
            return self._captured.train_step(model, sample, optimizer, ignore_grad)

    @contextlib.contextmanager
    def first_update_timed(self):
        """Logs the time of the first update after the layers were compiled: the compilation's."""
        if self._first_update != 0.0:
            yield
            return
        started = time.perf_counter()
        yield
        self._first_update = time.perf_counter() - started
        logger.info(f"the first update, compiling the layers, took {self._first_update:.1f} s")

    @property
    def codec(self) -> TextCodec:
        """The corpus's own text codec, for turning hypotheses into text."""
        if self._codec is None:
            self._codec = TextCodec.from_data_dir(self.cfg.data, self.meta)
        return self._codec

    # ---- generation -------------------------------------------------------------------

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        check_settings({name: getattr(args, name) for name in SEARCH_FLAGS if getattr(args, name, None) is not None},
                       flag)
        extra = dict(extra_gen_cls_kwargs or {})
        extra.setdefault("top_pages", self.generation_defaults.top_pages)
        extra.setdefault("compile_decoder", getattr(self.cfg, "compile_decoder", False))
        extra.setdefault("decoding", "eager" if getattr(self.cfg, "eager_decoding", False) else "auto")
        extra.setdefault("patient", getattr(self.cfg, "patient_search", False))
        return super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls or PageSumSequenceGenerator, extra_gen_cls_kwargs=extra, **kwargs
        )

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        hypos = super().inference_step(generator, models, sample, prefix_tokens, constraints)
        if generator is not self._rouge_generator:  # fairseq-generate, not validation
            self._write_outputs(sample, hypos)
            # fairseq-generate scores the targets it is shown with BLEU on token ids; this task
            # prints ROUGE against the references when the split is done (_write_outputs).
            sample["target"] = None
        return hypos

    def _write_outputs(self, sample, hypos) -> None:
        if self.cfg.gen_subset not in self.datasets:  # a direct call, not fairseq-generate on a loaded split
            return
        if self.meta.tokenizer == "none" and not (self.cfg.hypotheses_output or self.cfg.page_weights_output):
            return  # ids without a tokenizer: no text to write and no ROUGE to print
        total = len(self.dataset(self.cfg.gen_subset))
        paths = {"hypotheses": self.cfg.hypotheses_output, "page_weights": self.cfg.page_weights_output}
        for name, path in paths.items():
            if path and name not in self._outputs:
                self._outputs[name] = InputOrderFile(path, total=total)
        for index, example_id, example_hypos in zip(sample["id"].tolist(), sample["example_ids"], hypos):
            best = example_hypos[0]
            text = self.codec.decode(best["tokens"])  # the same line in both files
            self._hypotheses[index] = text
            if "hypotheses" in self._outputs:
                self._outputs["hypotheses"].add(index, text)
            if "page_weights" in self._outputs:
                record = page_weights_record(example_id, text, self.codec.symbols(best["tokens"]), best["page_weights"])
                self._outputs["page_weights"].add(index, record)
        if len(self._hypotheses) == total:
            self._print_rouge()

    def _print_rouge(self) -> None:
        """ROUGE of the whole split against its references, as pagesum-score computes it."""
        split = self.cfg.gen_subset
        references = CorpusSplit(self.cfg.data, split).references()
        hypotheses = [self._hypotheses[i] for i in range(len(references))]
        scores = corpus_rouge(hypotheses, references, workers=1)
        print(f"Generate {split}: " + ", ".join(f"{LABELS[m]} {scores[m]:.2f}" for m in ROUGE_METRICS)
              + f" (F1 x 100 against {split}.reference.txt; pagesum-score adds 95% intervals)", flush=True)

    # ---- validation by ROUGE -------------------------------------------------------------

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        self.generation_defaults = self.decoding_defaults(model_name(model))
        if self.cfg.eval_rouge:
            settings = self.validation_decoding()
            self._rouge_generator = self.build_generator([model], argparse.Namespace(**settings.as_kwargs()),
                                                         extra_gen_cls_kwargs={"top_pages": settings.top_pages})
        return model

    def validation_decoding(self) -> GenerationDefaults:
        """The generation defaults with --eval-rouge-args over them; a setting they do not hold, or
        a value the search cannot use, is refused in one line, not passed on to be ignored."""
        try:
            given = json.loads(self.cfg.eval_rouge_args)
        except json.JSONDecodeError as error:
            raise SettingError(f"--eval-rouge-args {self.cfg.eval_rouge_args}: not JSON ({error})") from None
        known = [setting.name for setting in fields(GenerationDefaults)]
        unknown = sorted(set(given) - set(known)) if isinstance(given, dict) else [repr(given)]
        if unknown:
            raise SettingError(f"--eval-rouge-args: {', '.join(unknown)} is not a setting; give an object of "
                               f"{', '.join(known)}")
        check_settings(given, lambda setting, value: f"--eval-rouge-args: {setting} {json.dumps(value)}")
        return replace(self.generation_defaults, **given)

    def valid_step(self, sample, model, criterion):
        loss, sample_size, logging_output = super().valid_step(sample, model, criterion)
        if self.cfg.eval_rouge:
            logging_output.update(self.validation_rouge(sample, model))
        return loss, sample_size, logging_output

    def validation_rouge(self, sample, model) -> Dict[str, float]:
        """The batch's ROUGE against its references, decoded with the dataset's defaults, as
        sums (so that batches and workers combine into the corpus mean in reduce_metrics)."""
        hypos = self.inference_step(self._rouge_generator, [model], sample)
        hyp_texts = [self.codec.decode(h[0]["tokens"]) for h in hypos]
        ref_texts = [self.codec.decode(t) for t in sample["target"]]
        sums = {f"_rouge_{name}_sum": mean * len(hyp_texts)
                for name, mean in corpus_rouge(hyp_texts, ref_texts, workers=1).items()}
        return {**sums, "_rouge_count": len(hyp_texts)}

    def reduce_metrics(self, logging_outputs, criterion):
        super().reduce_metrics(logging_outputs, criterion)
        if not self.cfg.eval_rouge:
            return
        count = sum(log.get("_rouge_count", 0) for log in logging_outputs)
        if count == 0:
            return
        for name in ROUGE_METRICS:
            total = sum(log.get(f"_rouge_{name}_sum", 0.0) for log in logging_outputs)
            metrics.log_scalar(name, total / count, count, round=2)
        # "rouge" is the single number for --best-checkpoint-metric: the mean of, R-Lsum
        metrics.log_derived("rouge", lambda meters: sum(meters[n].avg for n in ROUGE_METRICS) / 3)
