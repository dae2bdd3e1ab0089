"""``transformers``' ``BartConfig`` and this plugin's model arguments, both ways: every
config field is converted, checked or without effect (``BART_CONFIG_FIELDS``), and what
cannot be expressed on the other side is refused by name."""

import argparse
from typing import List

try:
    import transformers
except ImportError as error:  # the hf extra is optional: say how to get it
    raise ImportError(f"pagesum-convert needs the hf extra (pip install 'pagesum[hf]'): {error}") from error

from ..architectures import ARCHITECTURES, Architecture, SYSTEMS, architecture_name
from ..hf import PageSumConfig
from .errors import ConversionError

HF_SPECIAL_IDS = {"bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2}

ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_accurate", "gelu_pytorch_tanh": "gelu_accurate",
               "tanh": "tanh", "linear": "linear"}

# Every field of transformers' BartConfig, by what the converter does with it; a field that
# transformers adds later fails tests/test_convert_hf.py until it is placed here.
BART_CONFIG_FIELDS = {
    # become fairseq arguments (fairseq_flags, fairseq_settings), or are read from the weights and compared
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

# The fields PageSumConfig adds to BartConfig's, and the criterion option that keeps each in a fairseq checkpoint.
PAGESUM_CONFIG_FIELDS = {"label_smoothing": "--label-smoothing", "loss_chunk_tokens": "--loss-chunk-tokens"}

# What to-hf writes as the generation configuration: this plugin's decoding rules (the
# summary starts with the forced <s>, which never comes again, and has at least one token;
# </s> ends it at the length limit), so that transformers' generate() gives the tokens
# fairseq-generate gives. transformers' lengths count the decoder start and the <s>.
HF_GENERATION = dict(decoder_start_token_id=2, bos_token_id=0, pad_token_id=1, eos_token_id=2,
                     forced_bos_token_id=0, forced_eos_token_id=2, bad_words_ids=[[0]], min_length=3)


def check_bart_config(config, source: str) -> None:
    """Refuse BART variants whose computation the fairseq BART layers do not reproduce."""
    if config.model_type not in ("bart", PageSumConfig.model_type):
        raise ConversionError(f"{source}: model_type {config.model_type!r} is not 'bart' or 'pagesum'")
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


def hf_dimensions(arch: Architecture) -> dict:
    """``arch``'s dimensions as ``BartConfig`` fields."""
    return dict(d_model=arch.embed_dim, encoder_layers=arch.layers, decoder_layers=arch.layers,
                encoder_attention_heads=arch.heads, decoder_attention_heads=arch.heads, encoder_ffn_dim=arch.ffn_dim,
                decoder_ffn_dim=arch.ffn_dim)


def architecture_for(config) -> str:
    """The PageSum architecture whose dimensions match, else its base with explicit dims."""
    for size in SYSTEMS["pagesum"].sizes:
        if all(getattr(config, k) == v for k, v in hf_dimensions(ARCHITECTURES[size]).items()):
            return architecture_name("pagesum", size)
    return architecture_name("pagesum", "bart_base")


def fairseq_flags(config, page_decoding: str) -> List[str]:
    """Command-line flags that rebuild ``config`` as a PageSum model; every dimension is
    explicit so that non-standard sizes survive in the saved arguments (with
    ``fairseq_settings``, what no flag can set)."""
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
    return [str(x) for pair in flags.items() for x in pair]


def fairseq_settings(config) -> dict:
    """Model arguments of ``config`` that no fairseq flag can set: transformers scales token
    embeddings by sqrt(d_model) when ``scale_embedding``, fairseq unless
    ``no_scale_embedding``, which BART's architectures default to True."""
    return {"no_scale_embedding": not config.scale_embedding}


def bart_config_from_args(args, vocab_size: int):
    """The ``BartConfig`` of a PageSum model's arguments; refuses layouts BART lacks."""
    return transformers.BartConfig(**bart_fields_from_args(args, vocab_size))


def pagesum_config_from_args(args, vocab_size: int, criterion: dict) -> PageSumConfig:
    """The ``PageSumConfig`` of a PageSum model's arguments and its criterion's settings
    (``criterion_settings``: the fields of ``PAGESUM_CONFIG_FIELDS`` it names; the others keep
    their defaults)."""
    fields = {**bart_fields_from_args(args, vocab_size), "forced_eos_token_id": None}
    # each of its default's type: transformers' config checks types strictly, and fairseq may hold 0 for 0.0
    settings = {name: type(getattr(PageSumConfig, name))(value) for name, value in criterion.items()}
    return PageSumConfig(**fields, **settings)


def bart_fields_from_args(args, vocab_size: int) -> dict:
    """The ``BartConfig`` fields of a model's arguments; refuses layouts BART lacks."""
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
    return dict(
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


def criterion_settings(state: dict) -> dict:
    """The fields of ``PAGESUM_CONFIG_FIELDS`` that a fairseq checkpoint's criterion names, with
    their values."""
    criterion = (state.get("cfg") or {}).get("criterion") or {}
    found = {}
    for name in PAGESUM_CONFIG_FIELDS:
        value = criterion.get(name) if isinstance(criterion, dict) else getattr(criterion, name, None)
        if value is None and state.get("args") is not None:
            value = getattr(state["args"], name, None)
        if value is not None:
            found[name] = value
    return found


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
