"""``pagesum-preprocess``: a corpus in its native format -> a tokenized corpus of sentence units.

The corpus is written once per dataset and tokenizer; pages are made when the data loads
(see ``pagesum_plugin.corpus.views``). ``--view`` (alias ``--locality``) and the page
sizes set the corpus's *default* view, recorded in ``meta.json``; the task's options
override it at training and decoding time.

Example::

    pagesum-preprocess --input-format arxiv --locality discourse --max-pages 8 \\
        --trainpref arxiv/train.txt --validpref arxiv/val.txt --testpref arxiv/test.txt \\
        --tokenizer gpt2 --gpt2-encoder-json bart/encoder.json --gpt2-vocab-bpe bart/vocab.bpe \\
        --gpt2-dict bart/dict.txt --destdir data-bin/arxiv-discourse --workers 8
"""

import logging
import shutil
import sys
from pathlib import Path

from pagesum_plugin.corpus.errors import MISMATCHED_FILES, InputError
from pagesum_plugin.corpus.format import DICT_FILE, GPT2_ENCODER_FILE, GPT2_MERGES_FILE, SENTENCEPIECE_FILE, CorpusMeta
from pagesum_plugin.corpus.tokenizers import build_dictionary, build_tokenizer, train_sentencepiece
from pagesum_plugin.corpus.views import ViewConfig
from pagesum_preprocess.arguments import SPLITS, build_parser
from pagesum_preprocess.binarize import (
    JobSettings, Skipped, binarize_split, iter_training_sentences, staged_directory,
)
from pagesum_preprocess.checks import UsageError, check_arguments, sentencepiece_message

MAX_SKIP_MESSAGES = 20  # skipped examples named one by one; all are counted

logger = logging.getLogger("pagesum-preprocess")


def prepare_tokenizer(args, destdir: Path):
    """Build (or train) the tokenizer, save it and the dictionary into ``destdir``."""
    if args.tokenizer == "gpt2":
        tokenizer = build_tokenizer("gpt2", encoder_json=args.gpt2_encoder_json, vocab_bpe=args.gpt2_vocab_bpe)
        tokenizer.save(destdir)
        shutil.copyfile(args.gpt2_dict, destdir / DICT_FILE)  # unchanged, as BART's model expects
        files = {"encoder_json": str(destdir / GPT2_ENCODER_FILE), "vocab_bpe": str(destdir / GPT2_MERGES_FILE)}
        return tokenizer, build_dictionary(tokenizer, destdir / DICT_FILE), files
    model = destdir / SENTENCEPIECE_FILE
    if args.sentencepiece_model:
        logger.info("reusing the sentencepiece model %s", args.sentencepiece_model)
        shutil.copyfile(args.sentencepiece_model, model)
        tokenizer = build_tokenizer("sentencepiece", model=model)
        return tokenizer, _save_dictionary(tokenizer, destdir), {"model": str(model)}
    logger.info("training sentencepiece (vocabulary %d) on %s", args.vocab_size, args.trainpref)
    # sentencepiece reads the sentences from C++: an InputError raised inside it would come
    # back wrapped in its own traceback, so it is caught here and raised again, whole.
    errors: list[InputError] = []

    def sentences():
        try:
            yield from iter_training_sentences(args.trainpref, args.input_format, args.skip_invalid)
        except InputError as error:
            errors.append(error)

    try:
        tokenizer = train_sentencepiece(sentences(), model, args.vocab_size)
    except RuntimeError as error:
        if errors:  # training on the sentences read before the bad line failed too
            raise errors[0] from None
        raise UsageError(sentencepiece_message(error, args.vocab_size, args.trainpref)) from None
    if errors:
        raise errors[0]
    return tokenizer, _save_dictionary(tokenizer, destdir), {"model": str(model)}


def _save_dictionary(tokenizer, destdir: Path):
    """The dictionary of a sentencepiece model, one symbol per piece, saved into ``destdir``."""
    dictionary = build_dictionary(tokenizer)
    dictionary.save(str(destdir / DICT_FILE))
    return dictionary


def run(args) -> CorpusMeta:
    check_arguments(args)  # every input, before any work starts
    splits = {split: getattr(args, f"{split}pref") for split in SPLITS if getattr(args, f"{split}pref")}
    view = ViewConfig(args.view, args.num_pages, args.max_pages, args.max_page_tokens, args.max_source_tokens,
                      spatial_split=args.spatial_split)
    with staged_directory(args.destdir) as destdir:
        tokenizer, dictionary, files = prepare_tokenizer(args, destdir)
        settings = JobSettings(args.input_format, tokenizer.name, files, str(destdir / DICT_FILE), args.skip_invalid)
        meta = CorpusMeta(
            tokenizer=tokenizer.name, dataset=args.dataset or args.input_format, view=view.view,
            num_pages=view.num_pages, max_pages=view.max_pages, spatial_split=view.spatial_split,
            max_page_tokens=view.max_page_tokens, max_source_tokens=view.max_source_tokens,
            max_summary_tokens=args.max_summary_tokens, dictionary_size=len(dictionary),
            vocab_size=tokenizer.vocab_size if tokenizer.name == "sentencepiece" else None,
            splits=sorted(splits, key=SPLITS.index),
        )
        skip_log = _SkipLogger()
        for split, path in splits.items():
            stats = binarize_split(path, split, destdir, settings, len(dictionary), view, args.max_summary_tokens,
                                   args.workers, progress=not args.no_progress, on_skip=skip_log)
            meta.stats[split] = stats.as_dict()
            logger.info(stats.report(split))
            if stats.examples == 0:  # nothing written: the staged directory goes with the error
                skipped = " (every one skipped as invalid)" if args.skip_invalid and sum(stats.skipped.values()) else ""
                raise UsageError(f"{path}: the {split} split holds no example{skipped}")
        meta.save(destdir)
    return meta


class _SkipLogger:
    """Names the first skipped examples; the counts by reason go to meta.json."""

    def __init__(self):
        self.seen = 0

    def __call__(self, skipped: Skipped) -> None:
        self.seen += 1
        if self.seen <= MAX_SKIP_MESSAGES:
            logger.warning("skipped: %s", skipped.message)
        elif self.seen == MAX_SKIP_MESSAGES + 1:
            logger.warning("more examples skipped; see the counts by reason")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(format="%(name)s | %(levelname)s | %(message)s", level=logging.INFO, stream=sys.stderr)
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except InputError as error:
        # A source and target file of different lengths cannot be skipped: the message says why.
        skippable = error.reason != MISMATCHED_FILES and not args.skip_invalid
        logger.error("%s%s", error, " (use --skip-invalid to skip such examples)" if skippable else "")
        return 1
    except UsageError as error:
        print(f"pagesum-preprocess: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
