"""Summarize raw documents from Python with a trained PageSum model.

    from pagesum_plugin import from_pretrained
    pagesum = from_pretrained("checkpoints/", "checkpoint_best.pt", data_name_or_path="data-bin/arxiv")
    summaries = pagesum.summarize(["A long document ...", [("Intro", "..."), ("Method", "...")]], beam=4)

Text is encoded by the corpus's own codec and paged by the same view code as the dataset,
with the task's view (the data directory's default unless overridden) unless a call
overrides it.

An AWESOME model (``segmented_summarization``) reads its documents segment by segment, as
the training data was segmented. One trained with salient sentences
(``--salient-sentences oracle`` or ``extractor``) needs them for every document: pass the
trained extractor, ``summarize(..., extractor="extractor/checkpoint_best.pt")`` (or a
``pagesum_plugin.systems.awesome.extraction_task.SalientExtractor``, for another threshold), or the labels
themselves, ``salient=[[0, 1, ...], ...]``, one per sentence of ``sentences(document)``.
"""

import logging
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from . import registration  # noqa: F401  (from_pretrained loads checkpoints of the plugin's models and tasks)
from .checkpoints.loading import load_for_inference
from .corpus.codec import unit_texts
from .corpus.readers import document_kind, example_from_raw
from .corpus.views import assemble_pages, plan_document, raw_document_view
from .data.paged_dataset import collate_pages, summary_target
from .generation.defaults import check_settings
from .generation.page_sequence_generator import PageSumSequenceGenerator
from .summaries import EmptyDocument, MalformedDocument, Reading, Summaries

Document = Union[str, Sequence[Any]]  # a text, a list of sections, or a list of documents
SalientLabels = Sequence[Union[bool, int]]  # one per sentence of a document (see ``sentences``)

logger = logging.getLogger(__name__)

PAGING_LEAST = {"batch_size": 1, "num_pages": 1, "max_pages": 1}  # summarize()'s other whole-number settings


def python_setting(setting: str, value) -> str:
    """A setting as given to ``summarize()``: ``beam=0``."""
    return f"{setting}={value!r}"


def from_pretrained(
    model_dir: str,
    checkpoint_file: str = "checkpoint_best.pt",
    data_name_or_path: Optional[str] = None,
    **arg_overrides,
) -> "PageSumHubInterface":
    """Load ``model_dir/checkpoint_file`` (or ``model_dir``, when it is the checkpoint file).
    The data directory (dict.txt, meta.json and the tokenizer files written by
    pagesum-preprocess) defaults to the one the checkpoint was trained on, else
    ``model_dir``. Mistakes raise ``CheckpointError`` with one line saying what to change."""
    model, task, data_dir = load_for_inference(model_dir, checkpoint_file, data_name_or_path, arg_overrides)
    return PageSumHubInterface(task, model, data_dir)


class PageSumHubInterface(nn.Module):
    def __init__(self, task, model, data_dir: str):
        super().__init__()
        self.task = task
        self.model = model.eval()
        self.dictionary = task.target_dictionary
        self.codec = task.codec
        self.view = task.view
        self.data_dir = data_dir
        self.register_buffer("_device_tracker", torch.zeros(0), persistent=False)

    @property
    def device(self) -> torch.device:
        return self._device_tracker.device

    # ---- paging and tokenization, shared with the dataset --------------------------------

    def pages(self, document: Document, locality: Optional[str] = None, salient: Optional[SalientLabels] = None,
              extractor=None, **view) -> List[torch.LongTensor]:
        """The page tensors of one document, each ``<s> ... </s>``; ``locality`` (or ``view``),
        ``num_pages``, ``max_pages``... override the task's view. A plain string has no
        structure, so a model trained on discourse or document pages reads it spatially
        (``num_pages`` pages) unless ``locality=`` says otherwise. An AWESOME model's pages
        are its segments; ``salient`` or ``extractor``: see ``summarize``."""
        return self.read(document, locality, salient, extractor, **view)[0]

    def read(self, document: Document, locality: Optional[str] = None, salient: Optional[SalientLabels] = None,
             extractor=None, **view) -> Tuple[List[torch.LongTensor], Optional[Reading]]:
        """``pages(document, ...)`` and how much of the document they read (None for an AWESOME
        model, which reads a document segment by segment). An empty document (or a cluster
        with an empty document) raises ``EmptyDocument``; one of no documented shape,
        ``MalformedDocument``."""
        example = example_from_raw(document)
        config = raw_document_view(document, self.view, locality, **view)
        document_ids = self.codec.encode_document(example)
        if not len(document_ids.unit_length):
            raise EmptyDocument("the document has no tokens")
        if self.task.segment_by_segment:  # the task reads a raw document its own way
            labels = self.task.salient_labels(document_ids, salient, extractor, self.device)
            return [torch.from_numpy(ids) for ids in self.task.document_inputs(document_ids, labels)], None
        if salient is not None or extractor is not None:
            raise ValueError("salient= and extractor= are for AWESOME models (--task segmented_summarization) only")
        plan = plan_document(document_ids, config)
        reading = Reading(tokens=int(plan.source_tokens[0]), read=int(plan.kept_tokens[0]),
                          pages_dropped=int(plan.dropped_pages[0]))
        pages = assemble_pages(document_ids, config, self.dictionary.bos(), self.dictionary.eos(), plan=plan)
        return [torch.from_numpy(page) for page in pages], reading

    def sentences(self, document: Document) -> List[str]:
        """The document's sentences as the model reads them, in order: what ``salient=``
        labels, one label each. Raises as ``read`` does."""
        return unit_texts(self.codec, self.codec.encode_document(example_from_raw(document)))

    def target(self, summary: str) -> torch.LongTensor:
        """``<s> summary </s>``, cut as the dataset cuts it."""
        return summary_target(self.codec.encode_summary(summary), self.dictionary.bos(), self.dictionary.eos(),
                              self.task.max_summary_tokens)

    def decode(self, tokens: torch.LongTensor) -> str:
        return self.codec.decode(tokens)

    # ---- summarization ----------------------------------------------------------------------

    @torch.no_grad()
    def summarize(
        self,
        documents: Union[Document, List[Document]],
        locality: Optional[str] = None,
        num_pages: Optional[int] = None,
        max_pages: Optional[int] = None,
        beam: Optional[int] = None,
        lenpen: Optional[float] = None,
        min_len: Optional[int] = None,
        max_len_b: Optional[int] = None,
        no_repeat_ngram_size: Optional[int] = None,
        top_pages: Optional[int] = None,
        batch_size: int = 8,
        return_page_weights: bool = False,
        extractor=None,
        salient: Optional[Sequence[SalientLabels]] = None,
        skip_invalid: bool = False,
        compile: bool = False,
        decoding: str = "auto",
        patient: Optional[bool] = None,
    ) -> Summaries:
        """Summaries of ``documents``, in order. A single ``str`` document may be passed alone.

        Decoding settings, ``top_pages`` included, default to the task's: its dataset's row of
        the generation defaults table (``pagesum_plugin.generation.defaults``) with its
        ``--top-pages``; any argument given overrides them.
        With ``return_page_weights``, each result is ``{"summary", "tokens", "page_weights"}``
        where ``page_weights`` is a (steps, pages) tensor.

        An AWESOME model trained with salient sentences needs one of (and any other model
        neither): ``extractor``, the extractor's checkpoint path (loaded once, read with the
        data directory's dictionary; a sentence is salient above probability 0.5) or a
        ``SalientExtractor``; or ``salient``, every document's labels, one per sentence of
        ``sentences(document)`` (a single ``str`` document's labels may be passed alone).

        The result is a list (``Summaries``) that also says what was not read: ``.truncated``
        maps every document longer than the view reads to how many of its tokens were read,
        ``.skipped`` every empty document skipped with ``skip_invalid=True`` (its place holds
        None) to the reason; without ``skip_invalid`` an empty document raises
        ``EmptyDocument`` naming it; so does a cluster with an empty document, which
        pagesum-preprocess refuses too. Documents are paged one batch at a time, so
        memory follows ``batch_size``, not the number of documents.

        Every document's shape and every setting are checked before anything is decoded: a
        document of no shape above (a bare ``(name, text)`` pair among the documents, a list
        mixing strings and sections, a section without a string ``text``...) raises
        ``MalformedDocument``, skip_invalid or not, and a setting of the wrong type or range
        (``beam=0``, ``top_pages=-1``, ``lenpen="2"``, ``batch_size=0``) ``SettingError``,
        each in one line naming the document or the setting.

        ``decoding``: "auto" runs every step after the first as one captured CUDA graph on CUDA
        and step by step elsewhere; "eager" always step by step (as ``--eager-decoding``);
        ``generation/static_search.py`` says more.

        ``compile=True`` runs every decoder layer compiled by ``torch.compile`` (as
        ``--compile-decoder``): the same summaries, after a first batch that pays the
        compilation.

        ``patient=True`` stops each example's search as transformers' ``early_stopping=False``
        does, as the PageSum authors decoded their test sets (as ``--patient-search``, the
        task's setting by default; ``generation/search_loop.py``'s ``Patience``)."""
        if isinstance(documents, str):
            documents = [documents]
            salient = None if salient is None else [salient]
        if not isinstance(documents, (list, tuple)):
            raise MalformedDocument(f"documents ({type(documents).__name__}): give a list of documents, or one "
                                    f"string")
        for i, document in enumerate(documents):  # every document's shape, before any is decoded
            try:
                document_kind(document)
            except MalformedDocument as error:
                raise MalformedDocument(f"document {i}: {error}") from None
        if salient is not None and len(salient) != len(documents):
            raise ValueError(f"salient= holds {len(salient)} label lists for {len(documents)} documents")
        given = dict(beam=beam, lenpen=lenpen, min_len=min_len, max_len_b=max_len_b,
                     no_repeat_ngram_size=no_repeat_ngram_size, top_pages=top_pages)
        check_settings({k: v for k, v in given.items() if v is not None}, python_setting)
        paging_sizes = dict(batch_size=batch_size, num_pages=num_pages, max_pages=max_pages)
        check_settings({k: v for k, v in paging_sizes.items() if v is not None}, python_setting, PAGING_LEAST)
        settings = replace(self.task.generation_defaults, **{k: v for k, v in given.items() if v is not None})
        generator_cls = getattr(self.task, "sequence_generator_cls", PageSumSequenceGenerator)
        if patient is None:
            patient = getattr(self.task.cfg, "patient_search", False)
        generator = generator_cls([self.model], self.dictionary, compile_decoder=compile, decoding=decoding,
                                  patient=bool(patient), **settings.generator_kwargs())
        results = Summaries([None] * len(documents))
        paging = dict(locality=locality, num_pages=num_pages, max_pages=max_pages, extractor=extractor)
        for start in range(0, len(documents), batch_size):  # paged a batch at a time: memory follows the batch
            batch = self._read_batch(documents, range(start, min(start + batch_size, len(documents))), salient,
                                     skip_invalid, results, **paging)
            if not batch:
                continue
            src_tokens = collate_pages(list(batch.values()), self.dictionary.pad()).to(self.device)
            for i, hypos in zip(batch, generator.generate([self.model], {"net_input": {"src_tokens": src_tokens}})):
                results[i] = self._result(hypos[0], return_page_weights)
        if results.truncated or results.skipped:
            logger.info(f"summarize: {len(results.truncated)} of {len(documents)} documents longer than the view "
                        f"reads, {len(results.skipped)} skipped: see the result's .truncated and .skipped")
        return results

    def _read_batch(self, documents, indices, salient, skip_invalid: bool, results: Summaries, **paging) -> dict:
        """{index: pages} of the documents at ``indices``; what the view cut and the empty
        documents skipped are recorded in ``results``."""
        batch = {}
        for i in indices:
            try:
                batch[i], reading = self.read(documents[i], salient=None if salient is None else salient[i], **paging)
            except EmptyDocument as error:
                if not skip_invalid:
                    raise EmptyDocument(f"document {i}: {error}; pass skip_invalid=True to skip such documents "
                                        f"(counted in the result's .skipped)") from None
                results.skipped[i] = str(error)
                continue
            if reading is not None and reading.dropped:
                results.truncated[i] = reading
        return batch

    def _result(self, hypo, with_weights: bool):
        summary = self.decode(hypo["tokens"])
        if not with_weights:
            return summary
        return {
            "summary": summary,
            "tokens": self.codec.symbols(hypo["tokens"]),
            "page_weights": None if hypo["page_weights"] is None else hypo["page_weights"].cpu(),
        }

    @torch.no_grad()
    def teacher_forced_page_weights(self, document: Document, summary: str, **paging) -> Dict[str, Any]:
        """Page weights at every position of a given (reference) summary: what Fig. 3 of the
        paper plots. Returns ``{"tokens": [...], "page_weights": (steps, pages) tensor}``."""
        pages = self.pages(document, **paging)
        target = self.target(summary)  # <s> summary </s>
        prev = torch.cat([target[-1:], target[:-1]]).unsqueeze(0).to(self.device)  # </s> <s> summary
        src_tokens = collate_pages([pages], self.dictionary.pad()).to(self.device)
        _, extra = self.model(src_tokens, None, prev)
        return {
            "tokens": self.codec.symbols(target),
            "page_weights": extra["page_weights"][0].t().float().cpu(),  # (steps, pages)
        }
