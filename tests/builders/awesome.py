"""Small AWESOME corpora, tiny AWESOME models and their plain-BART twins.

``write_text_corpus`` writes a real-text corpus (ACL papers, cut short) with a byte-level
BPE trained on it, through the corpus format's own writer, so that segmentation,
target assignment and salient sentences run on text as they do on GovReport.
"""

import os
from typing import Dict, List, Sequence

import numpy as np
import torch
from fairseq import options, tasks
from fairseq.data import data_utils
from fairseq.models.bart import BARTModel

import pagesum_plugin.registration  # noqa: F401  (registers the tasks, models and criteria)
from builders.bpe import build_gpt2_bpe
from builders.corpora import acl_papers
from pagesum_plugin.corpus.codec import TextCodec
from pagesum_plugin.criterions.paged_cross_entropy import PagedLabelSmoothedCrossEntropy
from pagesum_plugin.corpus.format import CorpusMeta
from pagesum_plugin.corpus.storage import SplitWriter
from pagesum_plugin.corpus.readers import example_from_raw
from pagesum_plugin.corpus.sentences import split_sentences
from pagesum_plugin.corpus.tokenizers import build_dictionary, build_tokenizer

SMALL_SEGMENTS = ["--min-tokens", "40", "--max-tokens", "80"]  # segments that a short text has several of


def paper_examples(n: int, offset: int = 0, sentences: int = 24) -> List[dict]:
    """``n`` papers as ``{"id", "text", "summary"}``, each cut to its first ``sentences`` sentences."""
    examples = []
    for paper in acl_papers(n, offset):
        body = [s for section in paper["sections"] for s in split_sentences(section["text"])][:sentences]
        examples.append({"id": paper["id"], "text": " ".join(body), "summary": paper["summary"]})
    return examples


def write_text_corpus(data_dir: str, splits: Dict[str, List[dict]], vocab_size: int = 600) -> TextCodec:
    """A data directory of ``{"id", "text", "summary"}`` examples with a GPT-2 BPE trained on them."""
    os.makedirs(data_dir, exist_ok=True)
    texts = [e["text"] for examples in splits.values() for e in examples]
    texts += [e["summary"] for examples in splits.values() for e in examples]
    files = build_gpt2_bpe(data_dir, texts, vocab_size=vocab_size)
    tokenizer = build_tokenizer("gpt2", encoder_json=files.encoder_json, vocab_bpe=files.vocab_bpe)
    codec = TextCodec(tokenizer, build_dictionary(tokenizer, files.dict_txt))
    for split, examples in splits.items():
        writer = SplitWriter(data_dir, split, len(codec.dictionary))
        for example in examples:
            document = codec.encode_document(example_from_raw(example["text"], example["id"], example["summary"]))
            summary = " ".join(example["summary"].split())
            writer.add(example["id"], summary, document, codec.encode_summary(summary))
        writer.close()
    CorpusMeta(tokenizer="gpt2", dataset="synthetic", view="segments", dictionary_size=len(codec.dictionary),
               splits=list(splits)).save(data_dir)
    return codec


# AWESOME's two memories as options; the compressive one still filling at the third segment of
# ``ended_apart``, states pushed out and compressed by then
MEMORY_OPTIONS = {"attentive": [], "compressive": ["--memory", "compressive", "--memory-slots", "16",
                                                   "--compression-rate", "2"]}


def build_awesome(data_dir: str, *extra_args: str, arch: str = "awesome_tiny", seed: int = 0):
    """(args, task, AwesomeModel) over ``data_dir`` with the segmented_summarization task, in eval mode."""
    argv = [
        data_dir, "--task", "segmented_summarization", "--arch", arch,
        "--criterion", "label_smoothed_cross_entropy", "--optimizer", "adam",
        "--dropout", "0.0", "--cpu", *extra_args,
    ]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = tasks.setup_task(args)
    torch.manual_seed(seed)
    return args, task, task.build_model(args).eval()


def build_extractor(data_dir: str, *extra_args: str, arch: str = "awesome_extractor_tiny", seed: int = 0):
    """(args, task, SalientExtractorModel) over ``data_dir`` with the salient_extraction task."""
    argv = [data_dir, "--task", "salient_extraction", "--arch", arch, "--criterion", "salient_extraction",
            "--optimizer", "adam", "--dropout", "0.0", "--cpu", *extra_args]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    task = tasks.setup_task(args)
    torch.manual_seed(seed)
    return args, task, task.build_model(args)


def save_checkpoint(path: str, args, model) -> None:
    """``model`` and the arguments it was built with, in the layout of a fairseq-train
    checkpoint that ``from_pretrained`` and ``checkpoint_utils`` load."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    history = [{"criterion_name": args.criterion, "optimizer_name": args.optimizer, "lr_scheduler_state": {"best": None},
                "num_updates": 0}]
    torch.save({"args": args, "model": model.state_dict(), "optimizer_history": history, "extra_state": {},
                "last_optimizer_state": None}, path)


def randomize_memories(model, scale: float = 0.5, seed: int = 0):
    """Memory read projections start at zero (the layer equals BART's); tests that need the
    memories to matter give them random weights."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".memory." in name and "read_attn.out_proj" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)
    return model


def awesome_bart_twin(args, task, model) -> BARTModel:
    """A stock fairseq BARTModel holding exactly the weights of a memory-free AWESOME model."""
    bart = BARTModel.build_model(args, task)
    bart.load_state_dict(model.state_dict(), strict=True)
    return bart.eval()


def segment_batch(segment_lists: Sequence[Sequence[Sequence[int]]], dictionary) -> torch.Tensor:
    """Content ids per segment per document -> (batch, max_segments, seg_len) ``<s> ... </s>`` rows."""
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    width = max(len(s) for doc in segment_lists for s in doc) + 2
    count = max(len(doc) for doc in segment_lists)
    out = torch.full((len(segment_lists), count, width), pad, dtype=torch.long)
    for i, doc in enumerate(segment_lists):
        for j, seg in enumerate(doc):
            out[i, j, : len(seg) + 2] = torch.tensor([bos, *seg, eos])
    return out


def segment_sample(segment_lists, summary_lists, dictionary) -> dict:
    """A batch as the segmented_summarization dataset collates it, from content ids."""
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    src = segment_batch(segment_lists, dictionary)
    targets = [[torch.tensor([bos, *s, eos]) for s in doc] for doc in summary_lists]
    width = max(len(t) for doc in targets for t in doc)
    target = torch.full((len(targets), src.size(1), width), pad, dtype=torch.long)
    prev = target.clone()
    for i, doc in enumerate(targets):
        for j, t in enumerate(doc):
            target[i, j, : len(t)] = t
            prev[i, j, : len(t)] = torch.cat([t[-1:], t[:-1]])
    full = [torch.tensor([bos, *[w for s in doc for w in s], eos]) for doc in summary_lists]
    return {
        "id": torch.arange(len(segment_lists)), "nsentences": len(segment_lists),
        "ntokens": int(target.ne(pad).sum()),
        "net_input": {"src_tokens": src, "src_lengths": src.ne(pad).sum(dim=(1, 2))},
        "segment_target": target, "segment_prev_output_tokens": prev,
        "target": data_utils.collate_tokens(full, pad, eos),
    }


def ended_apart(dictionary, shift: int = 0) -> dict:
    """Three documents of 2, 4 and 1 segments, as collated: the second runs alone from its third
    segment on. ``shift``: other tokens, the same shapes."""
    w = dictionary.nspecial + shift
    segments = [[[w + 1, w + 2, w + 3], [w + 4, w + 5]],
                [[w + 6] * 5, [w + 7, w + 8], [w + 9] * 4, [w + 10]],
                [[w + 11, w + 12]]]
    summaries = [[[w + 13], [w + 14, w + 15]],
                 [[w + 16, w + 17, w + 18], [w + 19], [w + 20, w + 21], [w + 22] * 3],
                 [[w + 23, w + 24]]]
    return segment_sample(segments, summaries, dictionary)


def first_segments(sample: dict, count: int) -> dict:
    """``sample`` with its first ``count`` segments only: a batch of the same documents and shapes
    but fewer segments."""
    return {**sample, "net_input": {**sample["net_input"], "src_tokens": sample["net_input"]["src_tokens"][:, :count]},
            "segment_target": sample["segment_target"][:, :count],
            "segment_prev_output_tokens": sample["segment_prev_output_tokens"][:, :count]}


def segment_criterion(task) -> PagedLabelSmoothedCrossEntropy:
    """The recipes' criterion for AWESOME, its loss 3 summary tokens at a time."""
    return PagedLabelSmoothedCrossEntropy(task, sentence_avg=False, label_smoothing=0.1, loss_chunk_tokens=3)


def random_segments(rng: np.random.RandomState, n: int, low: int, high: int, min_len: int = 4, max_len: int = 10):
    return [rng.randint(low, high, size=rng.randint(min_len, max_len + 1)).tolist() for _ in range(n)]
