"""``pagesum-convert``: checkpoints between Hugging Face ``transformers`` BART and this plugin.

Two directions:

* ``from-hf``: a ``BartForConditionalGeneration`` directory (``config.json``, weights, and
  the tokenizer's ``vocab.json``/``merges.txt``), optionally with a PageSum authors' state
  dict (a BART state dict plus the ``lin`` confidence layer), becomes ``model.pt`` for
  architecture ``pagesum`` with a fairseq ``dict.txt`` and the BPE files that go with it.
* ``to-hf``: a checkpoint of this plugin becomes a ``transformers`` BART directory plus a
  state dict in the PageSum authors' layout (the BART weights and ``lin.*``).

Vocabulary. A BART embedding row ``i`` is token ``i`` of the Hugging Face tokenizer, so
the converted ``dict.txt`` keeps that order: fairseq index ``i`` is Hugging Face id ``i``
and embeddings are copied unchanged. By default the symbol of index ``i`` is ``"i"`` and
``encoder.json`` is the tokenizer's ``vocab.json``, so fairseq's GPT-2 BPE (and
``pagesum-preprocess --tokenizer gpt2``) emits exactly the Hugging Face ids. With
``--gpt2-encoder-json`` the symbols are GPT-2 ids instead, the convention of fairseq's own
BART ``dict.txt``. Either way data must be preprocessed with the written ``dict.txt``.

``transformers`` (the ``hf`` extra) is imported by this module only.
"""

import argparse
import json
import logging
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch
from fairseq.data import Dictionary

try:
    import transformers
    from safetensors.torch import load_file as load_safetensors
except ImportError as error:  # the hf extra is optional: say how to get it
    raise ImportError(f"pagesum-convert needs the hf extra (pip install 'pagesum[hf]'): {error}") from error

from ..corpus.format import CorpusMeta
from ..corpus.tokenizers import GPT2_FILES
from ..models.pagesum import fresh_confidence_state
from .builder import build_model, save_checkpoint
from .safety import CheckpointError, load_checkpoint_file

logger = logging.getLogger("pagesum_plugin.checkpoints.convert")

# fairseq's Dictionary always puts these four first; BART's tokenizer uses the same ids.
FAIRSEQ_SPECIALS = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
HF_SPECIAL_IDS = {"bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2}
CONFIDENCE_KEYS = {"lin.weight": "decoder.page_confidence.weight", "lin.bias": "decoder.page_confidence.bias"}
# Hugging Face activation name -> fairseq activation with the same formula.
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_accurate", "gelu_pytorch_tanh": "gelu_accurate",
               "tanh": "tanh", "linear": "linear"}
# Named fairseq architectures and the dimensions that define them.
NAMED_ARCHS = {
    "pagesum_bart_large": dict(d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                               decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096),
    "pagesum_bart_base": dict(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                              decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072),
}
# Every field of transformers' BartConfig, by what the converter does with it; a field that
# transformers adds later fails tests/test_convert_hf.py until it is placed here.
BART_CONFIG_FIELDS = {
    # become fairseq arguments (fairseq_flags), or are read from the weights and compared
    "converted": {"activation_dropout", "activation_function", "attention_dropout", "d_model",
                  "decoder_attention_heads", "decoder_ffn_dim", "decoder_layerdrop", "decoder_layers", "dropout",
                  "encoder_attention_heads", "encoder_ffn_dim", "encoder_layerdrop", "encoder_layers",
                  "max_position_embeddings", "scale_embedding", "vocab_size", "tie_word_embeddings"},
    # must hold the one value fairseq's BART computes with (check_bart_config)
    "checked": {"model_type", "bos_token_id", "pad_token_id", "eos_token_id", "decoder_start_token_id",
                "is_encoder_decoder", "is_decoder"},
    # change nothing the converted model computes: initialization, classification heads,
    # generation and output options, bookkeeping; chunked feed-forward computes the same
    "no_effect": {"_name_or_path", "architectures", "chunk_size_feed_forward", "classifier_dropout", "dtype",
                  "forced_eos_token_id", "id2label", "init_std", "label2id", "output_attentions",
                  "output_hidden_states", "problem_type", "return_dict", "transformers_version", "use_cache"},
}
# What to-hf writes as the generation configuration: this plugin's decoding rules (the
# summary starts with the forced <s>, which never comes again, and has at least one token;
# </s> ends it at the length limit), so that transformers' generate() gives the tokens
# fairseq-generate gives. transformers' lengths count the decoder start and the <s>.
HF_GENERATION = dict(decoder_start_token_id=2, bos_token_id=0, pad_token_id=1, eos_token_id=2,
                     forced_bos_token_id=0, forced_eos_token_id=2, bad_words_ids=[[0]], min_length=3)
CHECKPOINT_NAME = "model.pt"
AUTHORS_STATE_DICT_NAME = "pagesum_state_dict.bin"


class ConversionError(ValueError):
    """A checkpoint that cannot be converted without changing what the model computes."""


# ---------------------------------------------------------------------------------------
# Hugging Face BART (+ lin) -> fairseq state dict
# ---------------------------------------------------------------------------------------

# Per-layer parameter names are the same in both layouts (self_attn.q_proj, fc1, ...).
def hf_to_fairseq_key(key: str) -> Optional[str]:
    """Map a BartForConditionalGeneration key to this plugin's key (None: handled apart)."""
    if key in CONFIDENCE_KEYS:
        return CONFIDENCE_KEYS[key]
    for side in ("encoder", "decoder"):
        prefix = f"model.{side}."
        if key.startswith(prefix):
            rest = key[len(prefix):]
            if rest == "embed_tokens.weight":
                return None  # tied to model.shared
            return f"{side}.{rest}"
    return None


def shared_embeddings(hf_state: Dict[str, torch.Tensor], source: str) -> torch.Tensor:
    """The token embedding matrix (vocab, dim), checking every tied copy agrees."""
    names = ["model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
             "lm_head.weight"]
    present = [n for n in names if n in hf_state]
    if not present:
        raise ConversionError(f"{source}: no token embeddings (expected one of {names})")
    weight = hf_state[present[0]]
    for name in present[1:]:
        if not torch.equal(hf_state[name], weight):
            raise ConversionError(
                f"{source}: {name} differs from {present[0]}; fairseq BART ties the input embeddings "
                "and the output projection, so untied weights cannot be converted exactly")
    return weight


def check_final_logits_bias(hf_state: Dict[str, torch.Tensor], source: str) -> None:
    """fairseq's output projection has no bias: only an all-zero bias converts exactly."""
    bias = hf_state.get("final_logits_bias")
    if bias is not None and bool(bias.ne(0).any()):
        raise ConversionError(
            f"{source}: final_logits_bias is not zero (max |b| = {bias.abs().max().item():.3g}); "
            "fairseq's BART output projection has no bias, so dropping it would change every "
            "log-probability. Released BART checkpoints have an all-zero bias.")


def strip_module_prefix(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """State dicts saved from DistributedDataParallel prefix every key with 'module.'."""
    if state and all(k.startswith("module.") for k in state):
        return {k[len("module."):]: v for k, v in state.items()}
    return state


def hf_state_to_fairseq(hf_state: Dict[str, torch.Tensor], source: str) -> Dict[str, torch.Tensor]:
    """BART (+ ``lin``) state dict -> this plugin's parameter names (no buffers)."""
    check_final_logits_bias(hf_state, source)
    embeddings = shared_embeddings(hf_state, source)
    converted = {
        "encoder.embed_tokens.weight": embeddings,
        "decoder.embed_tokens.weight": embeddings,
        "decoder.output_projection.weight": embeddings,
    }
    tied_or_dropped = {"model.shared.weight", "model.encoder.embed_tokens.weight",
                       "model.decoder.embed_tokens.weight", "lm_head.weight", "final_logits_bias"}
    unknown = []
    for key, value in hf_state.items():
        target = hf_to_fairseq_key(key)
        if target is not None:
            converted[target] = value
        elif key not in tied_or_dropped:
            unknown.append(key)
    if unknown:
        raise ConversionError(f"{source}: keys with no place in a PageSum model: {sorted(unknown)[:10]}")
    return converted


# ---------------------------------------------------------------------------------------
# Configuration <-> fairseq arguments
# ---------------------------------------------------------------------------------------

def check_bart_config(config, source: str) -> None:
    """Refuse BART variants whose computation the fairseq BART layers do not reproduce."""
    if config.model_type != "bart":
        raise ConversionError(f"{source}: model_type {config.model_type!r} is not 'bart'")
    for name, expected in HF_SPECIAL_IDS.items():
        if getattr(config, name, expected) != expected:
            raise ConversionError(
                f"{source}: {name} = {getattr(config, name)}, but fairseq dictionaries fix it at {expected}")
    if not config.is_encoder_decoder or getattr(config, "is_decoder", False):
        raise ConversionError(f"{source}: not an encoder-decoder BART (is_encoder_decoder = "
                              f"{config.is_encoder_decoder}, is_decoder = {getattr(config, 'is_decoder', False)})")
    if config.activation_function not in ACTIVATIONS:
        raise ConversionError(f"{source}: activation_function {config.activation_function!r} has no fairseq "
                              f"equivalent (supported: {sorted(ACTIVATIONS)})")
    # Options of older BART configurations that change the layer layout.
    for name, expected in (("normalize_before", False), ("add_final_layer_norm", False),
                           ("static_position_embeddings", False), ("normalize_embedding", True),
                           ("add_bias_logits", False)):
        if getattr(config, name, expected) != expected:
            raise ConversionError(f"{source}: {name} = {getattr(config, name)} is not supported "
                                  f"(fairseq BART layout needs {expected})")


def architecture_for(config) -> str:
    """The named architecture whose dimensions match, else base with explicit dims."""
    for arch, dims in NAMED_ARCHS.items():
        if all(getattr(config, k) == v for k, v in dims.items()):
            return arch
    return "pagesum_bart_base"


def fairseq_flags(config, page_decoding: str) -> List[str]:
    """Command-line flags that rebuild ``config`` as a PageSum model; every dimension is
    explicit so that non-standard sizes survive in the saved arguments."""
    flags = {
        "--page-decoding": page_decoding,
        "--encoder-embed-dim": config.d_model,
        "--decoder-embed-dim": config.d_model,
        "--decoder-output-dim": config.d_model,
        "--encoder-layers": config.encoder_layers,
        "--decoder-layers": config.decoder_layers,
        "--encoder-attention-heads": config.encoder_attention_heads,
        "--decoder-attention-heads": config.decoder_attention_heads,
        "--encoder-ffn-embed-dim": config.encoder_ffn_dim,
        "--decoder-ffn-embed-dim": config.decoder_ffn_dim,
        "--max-source-positions": config.max_position_embeddings,
        "--max-target-positions": config.max_position_embeddings,
        "--activation-fn": ACTIVATIONS[config.activation_function],
        "--dropout": config.dropout,
        "--attention-dropout": config.attention_dropout,
        "--activation-dropout": config.activation_dropout,
        "--encoder-layerdrop": config.encoder_layerdrop,
        "--decoder-layerdrop": config.decoder_layerdrop,
    }
    argv = [str(x) for pair in flags.items() for x in pair]
    if not config.scale_embedding:
        argv.append("--no-scale-embedding")
    return argv


def bart_config_from_args(args, vocab_size: int):
    """The ``BartConfig`` of a PageSum model's arguments; refuses layouts BART lacks."""
    required = {
        "encoder_normalize_before": False, "decoder_normalize_before": False, "layernorm_embedding": True,
        "share_all_embeddings": True, "share_decoder_input_output_embed": True,
        "encoder_learned_pos": True, "decoder_learned_pos": True, "no_token_positional_embeddings": False,
    }
    wrong = {k: getattr(args, k, None) for k, v in required.items() if bool(getattr(args, k, None)) != v}
    if wrong:
        raise ConversionError(f"not a BART layout, cannot express in transformers: {wrong}")
    if args.encoder_embed_dim != args.decoder_embed_dim or args.max_source_positions != args.max_target_positions:
        raise ConversionError("transformers' BART needs equal encoder/decoder widths and position tables")
    to_hf_activation = {v: k for k, v in reversed(list(ACTIVATIONS.items()))}
    if args.activation_fn not in to_hf_activation:
        raise ConversionError(f"activation {args.activation_fn!r} has no transformers equivalent")
    return transformers.BartConfig(
        vocab_size=vocab_size,
        d_model=args.encoder_embed_dim,
        encoder_layers=args.encoder_layers,
        decoder_layers=args.decoder_layers,
        encoder_attention_heads=args.encoder_attention_heads,
        decoder_attention_heads=args.decoder_attention_heads,
        encoder_ffn_dim=args.encoder_ffn_embed_dim,
        decoder_ffn_dim=args.decoder_ffn_embed_dim,
        max_position_embeddings=args.max_source_positions,
        activation_function=to_hf_activation[args.activation_fn],
        # transformers' config validates types strictly; fairseq may hold 0 for 0.0
        dropout=float(args.dropout),
        attention_dropout=float(args.attention_dropout),
        activation_dropout=float(args.activation_dropout),
        encoder_layerdrop=float(getattr(args, "encoder_layerdrop", 0.0)),
        decoder_layerdrop=float(getattr(args, "decoder_layerdrop", 0.0)),
        scale_embedding=not args.no_scale_embedding,
        tie_word_embeddings=True,
        **HF_SPECIAL_IDS,
        forced_eos_token_id=2,
    )


# ---------------------------------------------------------------------------------------
# Dictionary
# ---------------------------------------------------------------------------------------

@dataclass
class Vocabulary:
    """What index ``i`` of the model means: a dict.txt symbol and (if known) a BPE token."""

    symbols: List[str]  # symbols[i] for i >= 4 (fairseq adds the four specials itself)
    encoder_json: Optional[dict]  # BPE token -> symbol id, written as encoder.json


def read_hf_vocab(hf_dir: Path, vocab_size: int) -> Optional[Dict[int, str]]:
    """The tokenizer's id -> token map, with its special tokens checked; None if absent."""
    path = hf_dir / "vocab.json"
    if not path.exists():
        return None
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ConversionError(f"{path}: not valid JSON ({err})") from None
    for token, expected in FAIRSEQ_SPECIALS.items():
        if vocab.get(token, expected) != expected:
            raise ConversionError(f"{path}: {token!r} has id {vocab[token]}, fairseq needs {expected}")
    # bart-large-cnn's tokenizer knows <mask> (id 50264) but its model has 50264 rows: such
    # tokens have no embedding, so they cannot be in dict.txt either.
    no_row = sorted((i, t) for t, i in vocab.items() if i >= vocab_size)
    if no_row:
        logger.warning(f"{path}: {len(no_row)} tokens have ids beyond the model's {vocab_size} embedding rows "
                       f"and are left out of dict.txt and encoder.json: {[t for _, t in no_row[:10]]}")
    return {i: t for t, i in vocab.items() if i < vocab_size}


def hf_id_vocabulary(id_to_token: Optional[Dict[int, str]], vocab_size: int) -> Vocabulary:
    """Symbols are the Hugging Face ids themselves; encoder.json is the tokenizer's vocab."""
    symbols = [str(i) for i in range(len(FAIRSEQ_SPECIALS), vocab_size)]
    encoder = None if id_to_token is None else {t: i for i, t in id_to_token.items()}
    return Vocabulary(symbols, encoder)


def gpt2_id_vocabulary(id_to_token: Dict[int, str], vocab_size: int, gpt2_encoder: dict) -> Vocabulary:
    """Symbols are GPT-2 ids (fairseq BART's convention); tokens GPT-2 lacks keep their text."""
    symbols = []
    for i in range(len(FAIRSEQ_SPECIALS), vocab_size):
        token = id_to_token.get(i)
        if token is None:
            symbols.append(f"madeupword{i:05d}")  # an embedding row no token uses
        elif token in gpt2_encoder:
            symbols.append(str(gpt2_encoder[token]))
        else:
            symbols.append(token)
    return Vocabulary(symbols, gpt2_encoder)


def write_dictionary(symbols: List[str], path: Path, expected_size: int):
    """Write dict.txt with fairseq's own Dictionary and check every index is where it should be."""
    dictionary = Dictionary()
    for index, symbol in enumerate(symbols, start=len(FAIRSEQ_SPECIALS)):
        if any(c.isspace() for c in symbol) or not symbol:
            raise ConversionError(f"token {index} ({symbol!r}) cannot be a dict.txt symbol (empty or whitespace)")
        if dictionary.add_symbol(symbol, n=0) != index:
            raise ConversionError(f"token {index}: symbol {symbol!r} occurs twice in the vocabulary")
    if len(dictionary) != expected_size:
        raise ConversionError(f"dictionary has {len(dictionary)} entries, model has {expected_size} rows")
    dictionary.save(str(path))
    return Dictionary.load(str(path))


# ---------------------------------------------------------------------------------------
# Building, filling and saving the fairseq model
# ---------------------------------------------------------------------------------------

def fill_model(model, converted: Dict[str, torch.Tensor], source: str) -> None:
    """Load converted weights strictly; a fresh confidence layer starts as on every path."""
    state = model.state_dict()
    missing = [k for k in state if k not in converted]
    new_layer = [k for k in missing if k in CONFIDENCE_KEYS.values()]
    if new_layer and len(new_layer) != len(CONFIDENCE_KEYS):
        raise ConversionError(f"{source}: only part of the lin layer is present: {new_layer} missing")
    if new_layer:
        converted = dict(converted, **fresh_confidence_state(state))
    buffers = {name for name, _ in model.named_buffers()}
    missing = [k for k in missing if k not in new_layer and k not in buffers]
    if missing:
        raise ConversionError(f"{source}: weights missing for {missing[:10]}")
    for key, value in converted.items():
        if key in state and tuple(value.shape) != tuple(state[key].shape):
            raise ConversionError(f"{source}: {key} has shape {tuple(value.shape)}, "
                                  f"the configuration needs {tuple(state[key].shape)}")
    full = {k: converted.get(k, v) for k, v in state.items()}
    model.load_state_dict(full, strict=True)


# ---------------------------------------------------------------------------------------
# from-hf
# ---------------------------------------------------------------------------------------

def load_state_dict_file(path: Path) -> Dict[str, torch.Tensor]:
    """A state dict from ``.safetensors`` or a torch pickle (weights-only)."""
    if not path.exists():
        raise ConversionError(f"{path}: file not found")
    if path.suffix == ".safetensors":
        return load_safetensors(str(path))
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means the same to the user
        raise ConversionError(f"{path}: not a readable weights-only state dict ({err})") from None
    if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
        raise ConversionError(f"{path}: expected a dict of tensors (a state dict)")
    return state


def hf_weights(hf_dir: Path) -> Optional[Dict[str, torch.Tensor]]:
    """The weights of a saved transformers directory (single file or sharded)."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (hf_dir / name).exists():
            return load_state_dict_file(hf_dir / name)
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (hf_dir / index_name).exists():
            shards = sorted(set(json.loads((hf_dir / index_name).read_text())["weight_map"].values()))
            state = {}
            for shard in shards:
                state.update(load_state_dict_file(hf_dir / shard))
            return state
    return None


def convert_from_hf(hf_dir: str, out_dir: str, state_dict: Optional[str] = None,
                    gpt2_encoder_json: Optional[str] = None, page_decoding: str = "page") -> Path:
    """Write ``model.pt``, ``dict.txt`` (and encoder.json/vocab.bpe) into ``out_dir``."""
    hf_dir, out = Path(hf_dir), Path(out_dir)
    if not (hf_dir / "config.json").exists():
        raise ConversionError(f"{hf_dir / 'config.json'}: not found (need a transformers BART directory)")
    config = transformers.BartConfig.from_pretrained(str(hf_dir))
    check_bart_config(config, str(hf_dir / "config.json"))

    source = state_dict or str(hf_dir)
    weights = load_state_dict_file(Path(state_dict)) if state_dict else hf_weights(hf_dir)
    if weights is None:
        raise ConversionError(f"{hf_dir}: no model.safetensors or pytorch_model.bin (or pass --state-dict)")
    converted = hf_state_to_fairseq(strip_module_prefix(weights), source)
    vocab_size = converted["encoder.embed_tokens.weight"].size(0)
    if config.vocab_size != vocab_size:
        raise ConversionError(f"{hf_dir / 'config.json'}: vocab_size = {config.vocab_size}, but the weights in "
                              f"{source} have {vocab_size} embedding rows")

    out.mkdir(parents=True, exist_ok=True)
    id_to_token = read_hf_vocab(hf_dir, vocab_size)
    if gpt2_encoder_json:
        if id_to_token is None:
            raise ConversionError(f"--gpt2-encoder-json needs the tokenizer's {hf_dir / 'vocab.json'}")
        vocabulary = gpt2_id_vocabulary(id_to_token, vocab_size, json.loads(Path(gpt2_encoder_json).read_text()))
    else:
        vocabulary = hf_id_vocabulary(id_to_token, vocab_size)
    write_dictionary(vocabulary.symbols, out / "dict.txt", vocab_size)
    write_bpe_files(hf_dir, out, vocabulary)
    # The directory describes itself, so that from_pretrained(out_dir, "model.pt") works at once.
    has_bpe = all((out / name).exists() for name in GPT2_FILES)
    CorpusMeta(tokenizer="gpt2" if has_bpe else "none", dictionary_size=vocab_size).save(out)

    args, _, model = build_model(out, architecture_for(config), *fairseq_flags(config, page_decoding))
    fill_model(model, converted, source)
    path = out / CHECKPOINT_NAME
    save_checkpoint(path, args, model)
    has_lin = CONFIDENCE_KEYS["lin.weight"] in converted
    logger.info(f"wrote {path} ({args.arch}, {vocab_size} tokens, "
                f"{'lin confidence layer converted' if has_lin else 'confidence layer started fresh'})")
    return path


def write_bpe_files(hf_dir: Path, out: Path, vocabulary: Vocabulary) -> None:
    """encoder.json and vocab.bpe, the pair fairseq's GPT-2 BPE reads, matching dict.txt."""
    merges = hf_dir / "merges.txt"
    if vocabulary.encoder_json is None or not merges.exists():
        logger.warning(f"{hf_dir}: no vocab.json/merges.txt, so no encoder.json/vocab.bpe written; dict.txt "
                       "symbols are the tokenizer's ids as decimal strings")
        return
    (out / "encoder.json").write_text(json.dumps(vocabulary.encoder_json, ensure_ascii=False), encoding="utf-8")
    shutil.copyfile(merges, out / "vocab.bpe")


# ---------------------------------------------------------------------------------------
# to-hf
# ---------------------------------------------------------------------------------------

def fairseq_state_to_hf(state: Dict[str, torch.Tensor]) -> Tuple[Dict[str, torch.Tensor], Dict[str, torch.Tensor]]:
    """This plugin's state dict -> (BartForConditionalGeneration state, lin state)."""
    embeddings = state["encoder.embed_tokens.weight"]
    hf = {"model.shared.weight": embeddings, "model.encoder.embed_tokens.weight": embeddings,
          "model.decoder.embed_tokens.weight": embeddings, "lm_head.weight": embeddings,
          "final_logits_bias": embeddings.new_zeros(1, embeddings.size(0))}
    lin = {}
    from_confidence = {v: k for k, v in CONFIDENCE_KEYS.items()}
    for key, value in state.items():
        if key in from_confidence:
            lin[from_confidence[key]] = value
        elif key.endswith(".version") or key in ("decoder.embed_tokens.weight", "decoder.output_projection.weight",
                                                  "encoder.embed_tokens.weight"):
            continue  # fairseq bookkeeping buffers and tied copies
        elif key.startswith(("encoder.", "decoder.")):
            hf[f"model.{key}"] = value
        else:
            raise ConversionError(f"{key}: no place for it in transformers' BART")
    return hf, lin


def hf_vocab_from_data(data_dir: Path, dictionary) -> Optional[Dict[str, int]]:
    """vocab.json (BPE token -> model index) from a data directory's encoder.json + dict.txt."""
    encoder_path = data_dir / "encoder.json"
    if not encoder_path.exists():
        return None
    encoder = json.loads(encoder_path.read_text(encoding="utf-8"))
    vocab = dict(FAIRSEQ_SPECIALS)
    unused = 0
    for token, symbol_id in encoder.items():
        if token in FAIRSEQ_SPECIALS:
            continue  # fixed at 0-3 by every fairseq dictionary
        index = dictionary.index(str(symbol_id))
        if index == dictionary.unk() and str(symbol_id) != "<unk>":
            unused += 1  # a BPE token the dictionary lacks: fairseq maps it to <unk> too
            continue
        vocab.setdefault(token, index)
    if unused:
        logger.warning(f"{encoder_path}: {unused} BPE tokens are not in dict.txt and map to <unk> "
                       "(left out of vocab.json)")
    return vocab


def convert_to_hf(checkpoint: str, out_dir: str, data_dir: Optional[str] = None) -> Path:
    """Write a transformers BART directory and the PageSum authors' state dict into ``out_dir``."""
    state = load_checkpoint_file(checkpoint)
    args = model_args(state, checkpoint)
    if getattr(args, "arch", "").split("_")[0] != "pagesum" and getattr(args, "_name", "") != "pagesum":
        raise ConversionError(f"{checkpoint}: architecture {getattr(args, 'arch', None)!r} is not a PageSum model")
    hf_state, lin = fairseq_state_to_hf(state["model"])
    vocab_size = hf_state["model.shared.weight"].size(0)
    config = bart_config_from_args(args, vocab_size)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = transformers.BartForConditionalGeneration(config)
    model.load_state_dict(hf_state, strict=True)
    model.generation_config = transformers.GenerationConfig(**HF_GENERATION)
    model.save_pretrained(str(out))
    torch.save({**{k: v.contiguous() for k, v in model.state_dict().items()}, **lin}, out / AUTHORS_STATE_DICT_NAME)
    if data_dir:
        write_hf_tokenizer(Path(data_dir), out, vocab_size)
    else:
        logger.warning(f"{out}: no tokenizer files written (pass --data with the checkpoint's data directory "
                       "to write vocab.json and merges.txt)")
    logger.info(f"wrote {out} (transformers BART) and {out / AUTHORS_STATE_DICT_NAME} (BART + lin)")
    return out


def model_args(state: dict, source: str) -> argparse.Namespace:
    """The model arguments of a fairseq checkpoint, old ('args') or new ('cfg') style."""
    if state.get("args") is not None:
        return state["args"]
    model_cfg = (state.get("cfg") or {}).get("model")
    if isinstance(model_cfg, argparse.Namespace):
        return model_cfg
    if isinstance(model_cfg, dict):
        return argparse.Namespace(**model_cfg)
    raise ConversionError(f"{source}: no model configuration in the checkpoint")


def write_hf_tokenizer(data_dir: Path, out: Path, vocab_size: int) -> None:
    dict_path = data_dir / "dict.txt"
    if not dict_path.exists():
        raise ConversionError(f"{dict_path}: not found")
    dictionary = Dictionary.load(str(dict_path))
    if len(dictionary) != vocab_size:
        raise ConversionError(f"{dict_path}: {len(dictionary)} entries, the model has {vocab_size} rows")
    vocab = hf_vocab_from_data(data_dir, dictionary)
    if vocab is None or not (data_dir / "vocab.bpe").exists():
        logger.warning(f"{data_dir}: no encoder.json/vocab.bpe (not a GPT-2 BPE data directory); "
                       "no tokenizer files written")
        return
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    shutil.copyfile(data_dir / "vocab.bpe", out / "merges.txt")


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pagesum-convert", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    from_hf = commands.add_parser("from-hf", help="transformers BART (+ PageSum lin) -> this plugin")
    from_hf.add_argument("hf_dir", help="directory with config.json, weights, vocab.json and merges.txt")
    from_hf.add_argument("out_dir", help="writes model.pt, dict.txt, encoder.json, vocab.bpe")
    from_hf.add_argument("--state-dict", metavar="FILE",
                         help="weights to use instead of hf_dir's, e.g. a PageSum authors' state dict with lin.*")
    from_hf.add_argument("--gpt2-encoder-json", metavar="FILE",
                         help="GPT-2's encoder.json: dict.txt symbols become GPT-2 ids, as in fairseq's BART dict.txt")
    from_hf.add_argument("--page-decoding", choices=("page", "global"), default="page")
    to_hf = commands.add_parser("to-hf", help="this plugin -> transformers BART + PageSum authors' state dict")
    to_hf.add_argument("checkpoint", help="a PageSum fairseq checkpoint")
    to_hf.add_argument("out_dir", help="writes config.json, model.safetensors, " + AUTHORS_STATE_DICT_NAME)
    to_hf.add_argument("--data", metavar="DIR", help="the checkpoint's data directory (dict.txt, encoder.json, "
                                                     "vocab.bpe): writes vocab.json and merges.txt")
    return parser


def main(argv: Optional[List[str]] = None) -> None:
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.INFO)
    args = build_parser().parse_args(argv)
    try:
        if args.command == "from-hf":
            convert_from_hf(args.hf_dir, args.out_dir, args.state_dict, args.gpt2_encoder_json, args.page_decoding)
        else:
            convert_to_hf(args.checkpoint, args.out_dir, args.data)
    except (ConversionError, CheckpointError) as err:
        sys.exit(f"pagesum-convert: error: {err}")


if __name__ == "__main__":
    main()
