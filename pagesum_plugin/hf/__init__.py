"""PageSum as a transformers model: ``PageSumForConditionalGeneration`` (``generate()``, ``Trainer``,
``save_pretrained``/``from_pretrained``), registered with the Auto classes as model type ``pagesum``.

This package imports torch, transformers, numpy and the plugin's torch-free corpus modules only (never
fairseq), so that a converted checkpoint
(``pagesum-convert to-hf``) runs where fairseq is not installed.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_pagesum import PageSumConfig
from .modeling_pagesum import (PageCache, PageSumForConditionalGeneration, PageSumModel, SummaryRules,
                               summary_lengths)
from .processing_pagesum import PageSumCollator, PageSumProcessor, pad_pages

AutoConfig.register(PageSumConfig.model_type, PageSumConfig, exist_ok=True)
AutoModel.register(PageSumConfig, PageSumModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(PageSumConfig, PageSumForConditionalGeneration, exist_ok=True)
# saved directories name these classes in their auto_map, for loading with trust_remote_code=True
PageSumConfig.register_for_auto_class()
PageSumModel.register_for_auto_class("AutoModel")
PageSumForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = ["PageCache", "PageSumCollator", "PageSumConfig", "PageSumForConditionalGeneration", "PageSumModel",
           "PageSumProcessor", "SummaryRules", "pad_pages", "summary_lengths"]
