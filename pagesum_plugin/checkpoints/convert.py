"""``pagesum-convert``: checkpoints between Hugging Face ``transformers`` BART and this plugin.

Two directions:

* ``from-hf``: a ``BartForConditionalGeneration`` directory (``config.json``, weights, and
  the tokenizer's ``vocab.json``/``merges.txt``), optionally with a PageSum authors' state
  dict (a BART state dict plus the ``lin`` confidence layer), becomes ``model.pt`` for
  architecture ``pagesum`` with a fairseq ``dict.txt`` and the BPE files that go with it.
* ``to-hf``: a PageSum checkpoint becomes a ``pagesum_plugin.hf.PageSumForConditionalGeneration``
  directory (config, safetensors, generation settings) plus a state dict in the PageSum authors'
  layout (the BART weights and ``lin.*``); a HEPOS checkpoint with full attention (BART reading
  the flat view) becomes a ``BartForConditionalGeneration`` directory. ``from-hf`` reads either
  back.

Vocabulary. A BART embedding row ``i`` is token ``i`` of the Hugging Face tokenizer, so
the converted ``dict.txt`` keeps that order: fairseq index ``i`` is Hugging Face id ``i``
and embeddings are copied unchanged. By default the symbol of index ``i`` is ``"i"`` and
``encoder.json`` is the tokenizer's ``vocab.json``, so fairseq's GPT-2 BPE (and
``pagesum-preprocess --tokenizer gpt2``) emits exactly the Hugging Face ids. With
``--gpt2-encoder-json`` the symbols are GPT-2 ids instead, the convention of fairseq's own
BART ``dict.txt``. Either way data must be preprocessed with the written ``dict.txt``.

The parts: ``hf_weights`` (state dicts), ``hf_config`` (configurations), ``hf_vocab``
(vocabularies); this module runs the two conversions and the command line. ``transformers``
(the ``hf`` extra) is imported by these modules only.
"""

import json
import logging
import sys
from pathlib import Path
from typing import List, Optional

import torch
import transformers

from ..atomic import staged_files
from ..corpus.format import DICT_FILE, GPT2_FILES, CorpusMeta
from ..errors import CheckpointError
from .arguments import AUTHORS_STATE_DICT_NAME, convert_parser
from .builder import build_model, save_checkpoint
from .errors import ConversionError
from ..generation.defaults import DATASETS
from ..hf import PageSumConfig, PageSumForConditionalGeneration, summary_lengths
from .hf_config import (HF_GENERATION, PAGESUM_CONFIG_FIELDS, architecture_for, bart_config_from_args,
                        check_bart_config, criterion_settings, fairseq_flags, fairseq_settings, model_args,
                        pagesum_config_from_args)
from .hf_vocab import (gpt2_id_vocabulary, hf_id_vocabulary, read_hf_vocab, write_bpe_files, write_dictionary,
                       write_hf_tokenizer)
from .hf_weights import (LIN_KEYS, fairseq_state_to_hf, fairseq_state_to_pagesum_hf, fill_model, hf_state_to_fairseq,
                         hf_weights, load_state_dict_file, strip_module_prefix)
from .safety import load_checkpoint_file

logger = logging.getLogger("pagesum_plugin.checkpoints.convert")

CHECKPOINT_NAME = "model.pt"


def convert_from_hf(hf_dir: str, out_dir: str, state_dict: Optional[str] = None,
                    gpt2_encoder_json: Optional[str] = None, page_decoding: str = "page") -> Path:
    """Write ``model.pt``, ``dict.txt`` (and encoder.json/vocab.bpe) into ``out_dir``."""
    hf_dir, out = Path(hf_dir), Path(out_dir)
    if not (hf_dir / "config.json").exists():
        raise ConversionError(f"{hf_dir / 'config.json'}: not found (need a transformers BART directory)")
    config = transformers.AutoConfig.from_pretrained(str(hf_dir))  # BART's, or PageSum's (registered by ..hf)
    check_bart_config(config, str(hf_dir / "config.json"))
    # a PageSum directory's own fields are the training criterion's settings
    criterion = (["--criterion", "paged_label_smoothed_cross_entropy",
                  *(a for name, option in PAGESUM_CONFIG_FIELDS.items() for a in (option, str(getattr(config, name))))]
                 if isinstance(config, PageSumConfig) else [])

    source = state_dict or str(hf_dir)
    weights = load_state_dict_file(Path(state_dict)) if state_dict else hf_weights(hf_dir)
    if weights is None:
        raise ConversionError(f"{hf_dir}: no model.safetensors or pytorch_model.bin (or pass --state-dict)")
    converted = hf_state_to_fairseq(strip_module_prefix(weights), source)
    vocab_size = converted["encoder.embed_tokens.weight"].size(0)
    if config.vocab_size != vocab_size:
        raise ConversionError(f"{hf_dir / 'config.json'}: vocab_size = {config.vocab_size}, but the weights in "
                              f"{source} have {vocab_size} embedding rows")

    id_to_token = read_hf_vocab(hf_dir, vocab_size)
    if gpt2_encoder_json:
        if id_to_token is None:
            raise ConversionError(f"--gpt2-encoder-json needs the tokenizer's {hf_dir / 'vocab.json'}")
        vocabulary = gpt2_id_vocabulary(id_to_token, vocab_size, json.loads(Path(gpt2_encoder_json).read_text()))
    else:
        vocabulary = hf_id_vocabulary(id_to_token, vocab_size)
    with staged_files(out) as staging:  # every file appears in out_dir only once all are written
        write_dictionary(vocabulary.symbols, staging / DICT_FILE, vocab_size)
        write_bpe_files(hf_dir, staging, vocabulary)
        # The directory describes itself, so that from_pretrained(out_dir, "model.pt") works at once.
        has_bpe = all((staging / name).exists() for name in GPT2_FILES)
        CorpusMeta(tokenizer="gpt2" if has_bpe else "none", dictionary_size=vocab_size).save(staging)

        args, _, model = build_model(staging, architecture_for(config), *fairseq_flags(config, page_decoding),
                                     *criterion, settings=fairseq_settings(config))
        fill_model(model, converted, source)
        args.data = str(out)  # the data directory the checkpoint names is out_dir, not the staging folder
        save_checkpoint(staging / CHECKPOINT_NAME, args, model)
    path = out / CHECKPOINT_NAME
    has_lin = LIN_KEYS["lin.weight"] in converted
    logger.info(f"wrote {path} ({args.arch}, {vocab_size} tokens, "
                f"{'lin confidence layer converted' if has_lin else 'confidence layer started fresh'})")
    return path


def convert_to_hf(checkpoint: str, out_dir: str, data_dir: Optional[str] = None) -> Path:
    """Write the transformers directory of a PageSum checkpoint (``PageSumForConditionalGeneration`` and the PageSum
    authors' state dict) or of a HEPOS checkpoint with full attention (``BartForConditionalGeneration``) into
    ``out_dir``."""
    state = load_checkpoint_file(checkpoint)
    args = model_args(state, checkpoint)
    system = (getattr(args, "arch", None) or getattr(args, "_name", None) or "").split("_")[0]  # pagesum_bart_large
    if system == "pagesum":
        if getattr(args, "page_decoding", "page") != "page":
            raise ConversionError(f"{checkpoint}: --page-decoding {args.page_decoding} has no transformers model "
                                  "(PageSumForConditionalGeneration decodes every page)")
        model = pagesum_hf_model(args, state["model"], criterion_settings(state))
        model.generation_config = pagesum_generation_config(model.config)
    elif system == "hepos" and (args.encoder_attention, args.cross_attention) == ("full", "full"):
        hf_state, _ = fairseq_state_to_hf(state["model"])
        model = transformers.BartForConditionalGeneration(bart_config_from_args(args, hf_state["model.shared.weight"]
                                                                                .size(0)))
        model.load_state_dict(hf_state, strict=True)
        model.generation_config = transformers.GenerationConfig(**HF_GENERATION)
    else:
        raise ConversionError(f"{checkpoint}: architecture {getattr(args, 'arch', None)!r} is neither a PageSum model "
                              "nor a HEPOS model with full attention (--encoder-attention full --cross-attention full)")

    out = Path(out_dir)
    vocab_size = model.config.vocab_size
    with staged_files(out) as staging:  # every file appears in out_dir only once all are written
        model.save_pretrained(str(staging))
        if system == "pagesum":
            _, lin = fairseq_state_to_hf(state["model"])
            bart = {k: v.contiguous() for k, v in model.state_dict().items() if not k.startswith("model.page_")}
            torch.save({**bart, "final_logits_bias": torch.zeros(1, vocab_size), **lin},
                       staging / AUTHORS_STATE_DICT_NAME)
        if data_dir:
            write_hf_tokenizer(Path(data_dir), staging, vocab_size)
    if not data_dir:
        logger.warning(f"{out}: no tokenizer files written (pass --data with the checkpoint's data directory "
                       "to write vocab.json and merges.txt)")
    written = (f"{type(model).__name__}) and {out / AUTHORS_STATE_DICT_NAME} (BART + lin)" if system == "pagesum"
               else f"{type(model).__name__})")
    logger.info(f"wrote {out} ({written}")
    return out


def pagesum_generation_config(config: PageSumConfig) -> transformers.GenerationConfig:
    """The plugin's default search (``generation/defaults.py``) as a PageSum directory's generation settings."""
    search = DATASETS["default"]
    lengths = summary_lengths(search.min_len, search.max_len_b)
    # the decoder has max_position_embeddings positions: the plugin's search stops there too
    lengths["max_length"] = min(lengths["max_length"], config.max_position_embeddings)
    return transformers.GenerationConfig(
        decoder_start_token_id=config.decoder_start_token_id, bos_token_id=config.bos_token_id,
        pad_token_id=config.pad_token_id, eos_token_id=config.eos_token_id, num_beams=search.beam,
        length_penalty=search.lenpen, no_repeat_ngram_size=search.no_repeat_ngram_size, early_stopping=True,
        **lengths)


def pagesum_hf_model(args, state: dict, criterion: dict) -> PageSumForConditionalGeneration:
    """The ``PageSumForConditionalGeneration`` of a PageSum model's arguments and state dict: the same weights,
    loaded strictly; ``criterion``: the training criterion's settings that the config keeps (``criterion_settings``,
    its defaults where absent)."""
    converted = fairseq_state_to_pagesum_hf(state)
    config = pagesum_config_from_args(args, converted["model.shared.weight"].size(0), criterion)
    model = PageSumForConditionalGeneration(config)
    model.load_state_dict(converted, strict=True)
    return model


def main(argv: Optional[List[str]] = None) -> None:
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    args = convert_parser().parse_args(argv)
    try:
        if args.command == "from-hf":
            convert_from_hf(args.hf_dir, args.out_dir, args.state_dict, args.gpt2_encoder_json, args.page_decoding)
        else:
            convert_to_hf(args.checkpoint, args.out_dir, args.data)
    except (ConversionError, CheckpointError) as err:
        sys.exit(f"pagesum-convert: error: {err}")
