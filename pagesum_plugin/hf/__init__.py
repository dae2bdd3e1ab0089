"""PageSum as a transformers model: ``PageSumForConditionalGeneration`` (``generate()``, ``Trainer``,
``save_pretrained``/``from_pretrained``), registered with the Auto classes as model type ``pagesum``.

This package imports torch, transformers, numpy and the plugin's torch-free corpus modules only (never
fairseq), so that a converted checkpoint
(``pagesum-convert to-hf``) runs where fairseq is not installed.
"""

import importlib.metadata
from typing import Optional

import transformers
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_pagesum import PageSumConfig
from .modeling_pagesum import (PageCache, PageSumForConditionalGeneration, PageSumModel, SummaryRules,
                               summary_lengths)
from .processing_pagesum import PageSumCollator, PageSumProcessor, pad_pages


def required_transformers() -> Optional[SpecifierSet]:
    """The transformers versions this package is written for: the ``hf`` extra's (setup.py), read
    from the installed distribution; None where the package runs from files that were not installed."""
    try:
        requires = importlib.metadata.requires("pagesum") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    return next((requirement.specifier for requirement in map(Requirement, requires)
                 if requirement.name == "transformers" and requirement.marker is not None
                 and requirement.marker.evaluate({"extra": "hf"})), None)


REQUIRED = required_transformers()
if REQUIRED is not None and not REQUIRED.contains(transformers.__version__, prereleases=True):
    # an older transformers fails later, deep inside a forward pass (5.17 names the cache argument differently)
    raise ImportError(f"pagesum_plugin.hf needs transformers{REQUIRED} (setup.py's hf extra): this "
                      f"environment has {transformers.__version__}")

AutoConfig.register(PageSumConfig.model_type, PageSumConfig, exist_ok=True)
AutoModel.register(PageSumConfig, PageSumModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(PageSumConfig, PageSumForConditionalGeneration, exist_ok=True)
# saved directories name these classes in their auto_map, for loading with trust_remote_code=True
PageSumConfig.register_for_auto_class()
PageSumModel.register_for_auto_class("AutoModel")
PageSumForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = ["PageCache", "PageSumCollator", "PageSumConfig", "PageSumForConditionalGeneration", "PageSumModel",
           "PageSumProcessor", "SummaryRules", "pad_pages", "summary_lengths"]
