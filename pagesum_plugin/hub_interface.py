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
``pagesum_plugin.awesome.extract.SalientExtractor``, for another threshold), or the labels
themselves, ``salient=[[0, 1, ...], ...]``, one per sentence of ``sentences(document)``.
"""

import os
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from .awesome.documents import unit_texts
from .awesome.extract import SalientExtractor
from .checkpoints.loading import load_for_inference
from .corpus.readers import example_from_raw
from .corpus.views import assemble_pages

STRUCTURED_VIEWS = ("discourse", "document", "documents")  # views that need sections or documents
from .data.paged_dataset import collate_pages, summary_target
from .generation import PageSumSequenceGenerator

Document = Union[str, Sequence[Any]]  # a text, a list of sections, or a list of documents
SalientLabels = Sequence[Union[bool, int]]  # one per sentence of a document (see ``sentences``)


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
        self._extractors: Dict[str, Any] = {}  # extractor checkpoints loaded so far, by path
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
        overrides = {k: v for k, v in {"view": locality, **view}.items() if v is not None}
        config = replace(self.view, **overrides)
        if isinstance(document, str) and locality is None and config.view in STRUCTURED_VIEWS:
            # A plain string has no sections or source documents: it is read spatially.
            config = replace(config, view="spatial")
        document_ids = self.codec.encode_document(example_from_raw(document))
        if hasattr(self.task, "document_inputs"):  # a segment-by-segment task reads documents its own way
            labels = self.salient_labels(document_ids, salient, extractor)
            return [torch.from_numpy(ids) for ids in self.task.document_inputs(document_ids, labels)]
        if salient is not None or extractor is not None:
            raise ValueError("salient= and extractor= are for AWESOME models (--task segmented_summarization) only")
        pages = assemble_pages(document_ids, config, self.dictionary.bos(), self.dictionary.eos())
        return [torch.from_numpy(page) for page in pages]

    def sentences(self, document: Document) -> List[str]:
        """The document's sentences as the model reads them, in order: what ``salient=``
        labels, one label each."""
        return unit_texts(self.codec, self.codec.encode_document(example_from_raw(document)))

    # ---- salient sentences (AWESOME) -----------------------------------------------------

    @property
    def salient_source(self) -> str:
        """Where the model's salient sentences came from in training: none, oracle or extractor."""
        return str(getattr(self.task.cfg, "salient_sentences", "none"))

    def salient_labels(self, document_ids, salient: Optional[SalientLabels] = None, extractor=None):
        """(n_sentences,) bool of an encoded document, or None for a model without salient
        sentences: the labels given, or the extractor's."""
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
        return self._extractor(extractor).predict(document_ids)

    def _extractor(self, extractor):
        """A ``SalientExtractor``: the one given, or the checkpoint at that path (loaded once)."""
        if hasattr(extractor, "predict"):
            return extractor
        path = os.fspath(extractor)
        if path not in self._extractors:
            self._extractors[path] = SalientExtractor.from_checkpoint(path, self.data_dir).to(self.device)
        return self._extractors[path]

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
        top_pages: int = 0,
        batch_size: int = 8,
        return_page_weights: bool = False,
        extractor=None,
        salient: Optional[Sequence[SalientLabels]] = None,
    ) -> Union[List[str], List[Dict[str, Any]]]:
        """Summaries of ``documents``, in order. A single ``str`` document may be passed alone.

        Decoding settings default to the corpus's dataset row of the generation defaults
        table (``pagesum_plugin.generation.defaults``); any argument given overrides it.
        With ``return_page_weights``, each result is ``{"summary", "tokens", "page_weights"}``
        where ``page_weights`` is a (steps, pages) tensor.

        An AWESOME model trained with salient sentences needs one of (and any other model
        neither): ``extractor``, the extractor's checkpoint path (loaded once, read with the
        data directory's dictionary; a sentence is salient above probability 0.5) or a
        ``SalientExtractor``; or ``salient``, every document's labels, one per sentence of
        ``sentences(document)`` (a single ``str`` document's labels may be passed alone)."""
        if isinstance(documents, str):
            documents = [documents]
            salient = None if salient is None else [salient]
        if salient is not None and len(salient) != len(documents):
            raise ValueError(f"salient= holds {len(salient)} label lists for {len(documents)} documents")
        given = dict(beam=beam, lenpen=lenpen, min_len=min_len, max_len_b=max_len_b,
                     no_repeat_ngram_size=no_repeat_ngram_size)
        settings = replace(self.task.generation_defaults, **{k: v for k, v in given.items() if v is not None})
        generator_cls = getattr(self.task, "sequence_generator_cls", PageSumSequenceGenerator)
        generator = generator_cls(
            [self.model],
            self.dictionary,
            beam_size=settings.beam,
            len_penalty=settings.lenpen,
            min_len=settings.min_len,
            max_len_b=settings.max_len_b,
            no_repeat_ngram_size=settings.no_repeat_ngram_size,
            top_pages=top_pages,
        )
        paged = [self.pages(d, locality=locality, num_pages=num_pages, max_pages=max_pages,
                            salient=None if salient is None else salient[i], extractor=extractor)
                 for i, d in enumerate(documents)]
        results = []
        for start in range(0, len(paged), batch_size):
            src_tokens = collate_pages(paged[start : start + batch_size], self.dictionary.pad()).to(self.device)
            sample = {"net_input": {"src_tokens": src_tokens}}
            for hypos in generator.generate([self.model], sample):
                best = hypos[0]
                results.append(self._result(best, return_page_weights))
        return results

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
