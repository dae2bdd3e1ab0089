"""hepos through the project's pipeline: the flat view, a training step, the task's generator,
and ``from_pretrained(...).summarize``."""

import argparse
import os

import pytest
import torch

from builders.bpe import build_gpt2_bpe
from builders.hepos import build_hepos
from builders.models import make_source_sensitive
from builders.paged_data import copy_task_examples, make_dictionary, write_corpus
from pagesum_plugin import from_pretrained
from pagesum_plugin.corpus.format import CorpusMeta

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one CPU thread

FLAT = ["--view", "flat", "--max-source-tokens", "24"]
SINKHORN = ["--encoder-attention", "sinkhorn", "--sinkhorn-block-size", "8"]
LSH = ["--encoder-attention", "lsh", "--lsh-bucket-size", "8"]


@pytest.fixture(scope="module")
def flat_corpus(tmp_path_factory):
    """The copy task's examples (several pages each), stored as a paged corpus."""
    data_dir = str(tmp_path_factory.mktemp("hepos_corpus"))
    dictionary = make_dictionary()
    write_corpus(data_dir, {split: copy_task_examples(n, dictionary, seed=seed)
                            for seed, (split, n) in enumerate({"train": 12, "valid": 6, "test": 6}.items())}, dictionary)
    return data_dir


def first_batch(task, split, size):
    task.load_dataset(split)
    dataset = task.dataset(split)
    return dataset.collater([dataset[i] for i in range(size)])


def test_the_flat_view_gives_one_sequence_per_example(flat_corpus):
    _, task, _ = build_hepos(flat_corpus, *FLAT)
    sample = first_batch(task, "test", 4)
    src = sample["net_input"]["src_tokens"]
    assert src.shape[:2] == (4, 1) and src.size(2) <= 24
    assert bool((src[:, 0, 0] == task.dictionary.bos()).all())


def test_a_training_step_runs_with_fairseq_label_smoothed_cross_entropy(flat_corpus):
    args, task, model = build_hepos(flat_corpus, *FLAT, *SINKHORN, "--label-smoothing", "0.1")
    criterion = task.build_criterion(args)
    sample = first_batch(task, "train", 4)
    model.train()
    loss, sample_size, logging = criterion(model, sample)
    loss.backward()
    assert torch.isfinite(loss) and sample_size == sample["ntokens"]
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_the_tasks_generator_decodes_a_flat_batch_without_page_weights(flat_corpus):
    args, task, model = build_hepos(flat_corpus, *FLAT, *LSH)
    sample = first_batch(task, "test", 4)
    generator = task.build_generator([model], argparse.Namespace(beam=3, max_len_b=8, min_len=2))
    hypos = task.inference_step(generator, [model], sample)
    assert len(hypos) == 4
    for example_hypos in hypos:
        assert len(example_hypos) == 3
        for hypo in example_hypos:
            assert hypo["tokens"][0] == task.dictionary.bos() and 3 <= len(hypo["tokens"]) <= 10
            assert hypo["page_weights"] is None


DOCUMENTS = [
    "The quick brown fox jumps over the lazy dog. Summaries are short; documents are long. " * 3,
    "Multi-document clusters hold several news stories about one event.",
    [("Intro", "Page-level encoders don't attend across pages."), ("Method", "Each page is encoded independently.")],
]


@pytest.fixture(scope="module")
def hepos_run(tmp_path_factory):
    """A data directory with a GPT-2 BPE tokenizer and the flat view by default, and a
    hepos_tiny checkpoint over it (random weights, made input-sensitive): (save_dir, data_dir)."""
    data_dir = tmp_path_factory.mktemp("hepos_text")
    build_gpt2_bpe(data_dir)
    CorpusMeta(tokenizer="gpt2", dataset="synthetic", view="flat", max_source_tokens=40, max_summary_tokens=16,
               dictionary_size=len(open(data_dir / "dict.txt").readlines()) + 4).save(data_dir)
    args, task, model = build_hepos(str(data_dir), *SINKHORN, "--hepos-stride", "2")
    make_source_sensitive(model, task.dictionary)  # no near-ties between beams for rounding to break
    save_dir = str(tmp_path_factory.mktemp("hepos_checkpoint"))
    history = [{"criterion_name": "LabelSmoothedCrossEntropyCriterion", "optimizer_name": "FairseqAdam",
                "lr_scheduler_state": {"best": None}, "num_updates": 0}]
    torch.save({"args": args, "model": model.state_dict(), "optimizer_history": history, "extra_state": {},
                "last_optimizer_state": None}, os.path.join(save_dir, "checkpoint_last.pt"))
    return save_dir, str(data_dir)


GEN = dict(beam=3, min_len=2, max_len_b=8, no_repeat_ngram_size=3)


def test_summarize_gives_one_summary_per_document(hepos_run):
    save_dir, data_dir = hepos_run
    hub = from_pretrained(save_dir, "checkpoint_last.pt", data_name_or_path=data_dir)
    summaries = hub.summarize(DOCUMENTS, **GEN)
    assert len(summaries) == len(DOCUMENTS) and all(isinstance(s, str) and s for s in summaries)


def test_summarize_reads_a_document_as_one_flat_sequence(hepos_run):
    save_dir, data_dir = hepos_run
    hub = from_pretrained(save_dir, "checkpoint_last.pt", data_name_or_path=data_dir)
    pages = hub.pages(DOCUMENTS[0])
    assert len(pages) == 1 and len(pages[0]) == 40  # cut to --max-source-tokens, <s> and </s> included
    assert len(hub.pages(DOCUMENTS[2])) == 1  # sections too


def test_summarize_batched_equals_one_at_a_time(hepos_run):
    save_dir, data_dir = hepos_run
    hub = from_pretrained(save_dir, "checkpoint_last.pt", data_name_or_path=data_dir)
    greedy = {**GEN, "beam": 1}  # a random model's tail is nearly flat: rounding may reorder lesser beams
    assert hub.summarize(DOCUMENTS, batch_size=3, **greedy) == [hub.summarize([d], **greedy)[0] for d in DOCUMENTS]
