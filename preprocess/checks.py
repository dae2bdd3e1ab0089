"""What ``pagesum-preprocess`` checks before any work starts, and the one line it prints for
each user mistake: a split or tokenizer file that is not there, a size that is not a
positive number, an output folder that is not a data directory, and a sentencepiece
vocabulary size that the training split cannot give."""

import re
from pathlib import Path

from pagesum_plugin.corpus.format import META_FILE
from pagesum_plugin.corpus.readers import multinews_target_path
from pagesum_preprocess.arguments import SPLITS

GPT2_FLAGS = ("gpt2_encoder_json", "gpt2_vocab_bpe", "gpt2_dict")
# flag -> the smallest value that makes sense, and why
SIZES = {
    "num_pages": (1, "pages per example"), "max_pages": (1, "pages per example"),
    "max_page_tokens": (3, "room for <s>, one token and </s>"),
    "max_source_tokens": (3, "room for <s>, one token and </s>"),
    "max_summary_tokens": (3, "room for <s>, one token and </s>"),
    "vocab_size": (1, "pieces"), "workers": (1, "processes"),
}
# sentencepiece's C++ messages for a vocabulary size the training text cannot give
TOO_LARGE = re.compile(r"Vocabulary size too high \((\d+)\)\. Please set it to a value <= (\d+)")
TOO_SMALL = re.compile(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)")


class UsageError(ValueError):
    """A command line that cannot work, with what to change, in one line."""


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_arguments(args) -> None:
    """Raise ``UsageError`` for the first mistake in ``args``, before anything is read or written."""
    for name, (least, what) in SIZES.items():
        if getattr(args, name) < least:
            raise UsageError(f"{flag(name)} {getattr(args, name)}: must be at least {least} ({what})")
    splits = {split: getattr(args, f"{split}pref") for split in SPLITS if getattr(args, f"{split}pref")}
    if not splits:
        raise UsageError("give at least one of --trainpref, --validpref, --testpref")
    for split, path in splits.items():
        check_split_path(f"--{split}pref", Path(path), args.input_format)
    if args.tokenizer == "gpt2":
        missing = [flag(name) for name in GPT2_FLAGS if not getattr(args, name)]
        if missing:
            raise UsageError(f"--tokenizer gpt2 needs {', '.join(missing)} (BART's encoder.json, vocab.bpe, dict.txt)")
        for name in GPT2_FLAGS:
            if not Path(getattr(args, name)).is_file():
                raise UsageError(f"{flag(name)} {getattr(args, name)}: no such file")
    elif args.sentencepiece_model:
        if not Path(args.sentencepiece_model).is_file():
            raise UsageError(f"--sentencepiece-model {args.sentencepiece_model}: no such file")
    elif not args.trainpref:
        raise UsageError("--tokenizer sentencepiece is trained on the training split: give --trainpref "
                         "(or reuse a trained model: --sentencepiece-model)")
    if args.sentencepiece_model and args.tokenizer != "sentencepiece":
        raise UsageError("--sentencepiece-model needs --tokenizer sentencepiece")
    destdir = Path(args.destdir)
    if destdir.exists() and (not destdir.is_dir() or (any(destdir.iterdir()) and not (destdir / META_FILE).exists())):
        raise UsageError(f"--destdir {destdir}: exists and is not a pagesum-preprocess data directory; "
                         f"choose a new folder")


def check_split_path(option: str, path: Path, input_format: str) -> None:
    if not path.exists():
        raise UsageError(f"{option} {path}: no such file or folder")
    if input_format == "aclsum":
        if not (path.is_dir() or path.suffix == ".json"):
            raise UsageError(f"{option} {path}: aclsum reads a folder of S2ORC .json papers, or one .json file")
        return
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a folder; --input-format {input_format} reads one file per split")
    if input_format == "multinews" and path.suffix not in (".jsonl", ".json"):
        if ".src" not in path.name:
            raise UsageError(f"{option} {path}: Multi-News sources are named *.src (targets *.tgt beside them), "
                             f"or give JSON lines (.jsonl)")
        target = multinews_target_path(path)
        if not target.is_file():
            raise UsageError(f"{option} {path}: its summaries {target} do not exist")


def sentencepiece_message(error: RuntimeError, vocab_size: int, training_split: str) -> str:
    """The one line for sentencepiece failing to train on ``training_split``, from its C++ message."""
    text = str(error)
    if (found := TOO_LARGE.search(text)) is not None:
        return (f"--vocab-size {vocab_size}: the training split gives sentencepiece at most {found.group(2)} "
                f"pieces; set --vocab-size {found.group(2)} or less")
    if (found := TOO_SMALL.search(text)) is not None:
        return (f"--vocab-size {vocab_size}: the training split has {found.group(2)} characters and special pieces "
                f"that every vocabulary holds; set --vocab-size {found.group(2)} or more")
    if "sentences_.empty()" in text:
        return f"{training_split}: the train split holds no example to train sentencepiece on"
    return f"sentencepiece could not train on the training split: {text.strip().splitlines()[0]}"
