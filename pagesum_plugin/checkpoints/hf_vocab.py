"""What index ``i`` of a converted model means: fairseq's ``dict.txt`` and the GPT-2 BPE files
on one side, the ``transformers`` tokenizer's ``vocab.json``/``merges.txt`` on the other."""

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from fairseq.data import Dictionary

from ..corpus.format import DICT_FILE, GPT2_ENCODER_FILE, GPT2_MERGES_FILE
from .errors import ConversionError

logger = logging.getLogger("pagesum_plugin.checkpoints.convert")

# AutoTokenizer's tokenizer_config.json for vocab.json + merges.txt: BART's GPT-2 BPE
HF_TOKENIZER_CONFIG = {"tokenizer_class": "BartTokenizer"}
# fairseq's Dictionary always puts these four first; BART's tokenizer uses the same ids.
FAIRSEQ_SPECIALS = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}


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


def write_bpe_files(hf_dir: Path, out: Path, vocabulary: Vocabulary) -> None:
    """encoder.json and vocab.bpe, the pair fairseq's GPT-2 BPE reads, matching dict.txt."""
    merges = hf_dir / "merges.txt"
    if vocabulary.encoder_json is None or not merges.exists():
        logger.warning(f"{hf_dir}: no vocab.json/merges.txt, so no encoder.json/vocab.bpe written; dict.txt "
                       "symbols are the tokenizer's ids as decimal strings")
        return
    (out / GPT2_ENCODER_FILE).write_text(json.dumps(vocabulary.encoder_json, ensure_ascii=False), encoding="utf-8")
    shutil.copyfile(merges, out / GPT2_MERGES_FILE)


def hf_vocab_from_data(data_dir: Path, dictionary) -> Optional[Dict[str, int]]:
    """vocab.json (BPE token -> model index) from a data directory's encoder.json + dict.txt."""
    encoder_path = data_dir / GPT2_ENCODER_FILE
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


def write_hf_tokenizer(data_dir: Path, out: Path, vocab_size: int) -> None:
    dict_path = data_dir / DICT_FILE
    if not dict_path.exists():
        raise ConversionError(f"{dict_path}: not found")
    dictionary = Dictionary.load(str(dict_path))
    if len(dictionary) != vocab_size:
        raise ConversionError(f"{dict_path}: {len(dictionary)} entries, the model has {vocab_size} rows")
    vocab = hf_vocab_from_data(data_dir, dictionary)
    if vocab is None or not (data_dir / GPT2_MERGES_FILE).exists():
        logger.warning(f"{data_dir}: no encoder.json/vocab.bpe (not a GPT-2 BPE data directory); "
                       "no tokenizer files written")
        return
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    shutil.copyfile(data_dir / GPT2_MERGES_FILE, out / "merges.txt")
    # what AutoTokenizer reads to build BART's tokenizer from these two files
    (out / "tokenizer_config.json").write_text(json.dumps(HF_TOKENIZER_CONFIG), encoding="utf-8")
