"""Target assignment (Appendix A.2), the extractor's oracle labels (Appendix D), global
salient content by text concatenation (Sec. 3.2), and the dataset that puts them together."""

import collections
import itertools
import logging
import os

import numpy as np
import pytest
import torch
from fairseq import utils
from fairseq.criterions import build_criterion

from builders.awesome import build_awesome, paper_examples, write_text_corpus
from pagesum_plugin.systems.awesome import label as label_cli
from pagesum_plugin.systems.awesome import segment as segment_cli
from pagesum_plugin.systems.awesome.cache import salient_path
from pagesum_plugin.systems.awesome.oracle import oracle_labels, oracle_positions
from pagesum_plugin.systems.awesome.targets import assign_sentences, segment_summaries
from pagesum_plugin.corpus.sentences import split_sentences
from pagesum_plugin.data.paged_dataset import collate_pages
from pagesum_plugin.systems.awesome.salient_content import SalientHeaders, augmented_input, outermost_first
from pagesum_plugin.evaluation.extractive import oracle
from pagesum_plugin.errors import SettingError
from pagesum_plugin.evaluation.rouge import score_pair, tokenize

SEGMENTS = [
    "The committee reviewed the budget of the agency and found large deficits in 2019.",
    "Hospitals reported long waiting times for veterans seeking care at rural clinics.",
    "The agency agreed to publish its budget and to audit the clinics every year.",
]


# --------------------------------------------------------------------------- targets


def test_each_summary_sentence_goes_to_its_most_overlapping_segment():
    summary = [
        "Veterans wait long for care at rural clinics.",
        "The budget showed deficits, the committee found.",
        "Audits of the clinics will be yearly.",
        "Nothing here overlaps.",
    ]
    assert assign_sentences(summary, SEGMENTS).tolist() == [1, 0, 2, 0]  # no overlap anywhere: a tie -> the first


@pytest.mark.parametrize("seed", range(3))
def test_assignment_maximizes_rouge_1_plus_rouge_2_of_the_project_scorer(seed):
    rng = np.random.RandomState(seed)
    words = "budget agency clinic veteran audit deficit care report year found wait".split()
    segments = [" ".join(rng.choice(words, 30)) for _ in range(4)]
    sentences = [" ".join(rng.choice(words, 6)) for _ in range(5)]
    for sentence, segment in zip(sentences, assign_sentences(sentences, segments)):
        scores = [score_pair(text, sentence) for text in segments]
        totals = [s["rouge1"] + s["rouge2"] for s in scores]
        assert segment == int(np.argmax(totals))


def test_a_segment_without_sentences_gets_an_empty_target():
    assert segment_summaries(["b.", "a.", "c."], np.array([1, 0, 1]), 3) == ["a.", "b. c.", ""]


# --------------------------------------------------------------------------- oracle


def r1_plus_r2(picked, summary: str) -> float:
    """ROUGE-1 + ROUGE-2 F1 of a set of sentences, n-grams within sentences, computed here
    from the project's tokenizer alone."""
    def grams(tokens, n):
        return collections.Counter(tuple(tokens[i: i + n]) for i in range(len(tokens) - n + 1))

    reference = tokenize(summary)
    total = 0.0
    for n in (1, 2):
        ref, hyp = grams(reference, n), collections.Counter()
        for sentence in picked:
            hyp += grams(tokenize(sentence), n)
        overlap = sum((ref & hyp).values())
        p, r = overlap / max(sum(hyp.values()), 1), overlap / max(sum(ref.values()), 1)
        total += 2 * p * r / (p + r) if p + r else 0.0
    return total


def brute_force_greedy(sentences, summary):
    """Greedy search by brute force: at every step score every remaining sentence added to
    those picked, from scratch; stop when nothing raises the score."""
    picked, best = [], 0.0
    while True:
        scores = [(r1_plus_r2([sentences[j] for j in sorted(picked + [i])], summary), -i)
                  for i in range(len(sentences)) if i not in picked]
        if not scores or max(scores)[0] <= best:
            return sorted(picked)
        best, i = max(scores)
        picked.append(-i)


@pytest.mark.parametrize("seed", range(6))
def test_the_oracle_greedy_search_equals_a_brute_force_greedy_search(seed):
    rng = np.random.RandomState(seed)
    words = "gao va care wait time audit budget clinic policy report".split()
    sentences = [" ".join(rng.choice(words, rng.randint(3, 9))) + "." for _ in range(7)]
    summary = " ".join(" ".join(rng.choice(words, 8)) + "." for _ in range(2))
    assert oracle_positions(sentences, summary) == brute_force_greedy(sentences, summary)


@pytest.mark.parametrize("seed", range(4))
def test_the_oracle_finds_the_exhaustive_optimum_when_the_summary_copies_sentences(seed):
    rng = np.random.RandomState(seed)
    sentences = [" ".join(f"w{rng.randint(100)}" for _ in range(6)) + "." for _ in range(6)]
    copied = sorted(rng.choice(6, 2, replace=False).tolist())
    summary = " ".join(sentences[i] for i in copied)
    subsets = [s for k in range(1, 7) for s in itertools.combinations(range(6), k)]
    best = max(subsets, key=lambda s: (r1_plus_r2([sentences[i] for i in s], summary), -len(s)))
    assert oracle_positions(sentences, summary) == list(best) == copied


def test_oracle_labels_mark_the_sentences_pagesum_baseline_picks_even_when_sentences_repeat():
    sentences = ["The clinics audit care.", "Budget deficits grew.", "The clinics audit care.", "Rain fell."]
    summary = "Budget deficits grew while the clinics audit care."
    labels = oracle_labels(sentences, summary)
    assert [sentences[i] for i in np.flatnonzero(labels)] == oracle(sentences, summary)
    assert labels.tolist() == [1, 1, 0, 0]  # equal sentences stay apart: only the first is picked


# --------------------------------------------------------------------------- salient content


HEADERS = SalientHeaders(current=(91,), previous=(92, 92), next=(93, 93))


def test_salient_sentences_are_added_outermost_first_until_the_input_is_full():
    past = [[10] * 3, [11] * 3, [12] * 3]  # in document order
    future = [[20] * 3, [21] * 3, [22] * 3]
    # budget after <s>, the header, 4 tokens of segment and </s>: 20 - 2 - 1 - 4 = 13 tokens:
    # past[0] + its header (5), future[2] + its header (5), then past[1] (3): 13; future[1] no longer fits
    ids = augmented_input(np.array([1, 1, 1, 1]), past, future, HEADERS, max_tokens=20, bos=0, eos=2)
    assert ids.tolist() == [0, 91, 1, 1, 1, 1, 92, 92, 10, 10, 10, 11, 11, 11, 93, 93, 22, 22, 22, 2]


def test_a_side_without_sentences_gets_no_header_and_the_other_side_takes_the_room():
    past_picked, future_picked = outermost_first([], [4, 4, 4], budget=10, previous_header=2, next_header=1)
    assert (past_picked, future_picked) == ([], [1, 2])  # the last two, in document order
    ids = augmented_input(np.array([1]), [], [[5, 5]], HEADERS, max_tokens=1024, bos=0, eos=2)
    assert ids.tolist() == [0, 91, 1, 93, 93, 5, 5, 2]


def test_a_side_stops_at_its_first_sentence_that_does_not_fit():
    assert outermost_first([9, 1], [1, 1], budget=4) == ([], [0, 1])  # past[1] is never taken before past[0]


# --------------------------------------------------------------------------- dataset


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("awesome_prepared"))
    papers = paper_examples(4, offset=10)
    codec = write_text_corpus(data_dir, {"train": papers[:2], "valid": papers[2:]})
    assert segment_cli.main([data_dir, "--embedding-model", "length", "--min-tokens", "150", "--max-tokens", "300"]) == 0
    assert label_cli.main([data_dir, "--workers", "1"]) == 0
    return data_dir, codec


def test_cached_targets_hold_every_reference_sentence_in_its_segment(prepared):
    data_dir, codec = prepared
    _, task, _ = build_awesome(data_dir, "--segmentation", "length")
    task.load_dataset("train")
    dataset = task.datasets["train"]
    for index in range(len(dataset)):
        item = dataset[index]
        reference = dataset.corpus.references()[index]
        targets = [codec.decode(t) for t in item["segment_targets"]]
        assert len(targets) == len(item["segments"]) >= 2
        assert sorted(s for t in targets for s in split_sentences(t)) == sorted(split_sentences(reference))
        segment_texts = [codec.decode(s) for s in item["segments"]]
        for j, (target, assigned) in enumerate(zip(targets, dataset.targets.of_example(index))):
            assert codec.decode(assigned) == target
            for sentence in split_sentences(target):  # no other segment overlaps it more
                assert assign_sentences([sentence], segment_texts)[0] == j


def test_salient_sentences_of_other_segments_join_every_segment_input(prepared):
    data_dir, codec = prepared
    _, task, _ = build_awesome(data_dir, "--segmentation", "length", "--salient-sentences", "oracle")
    task.load_dataset("train")
    dataset = task.datasets["train"]
    labels = np.load(salient_path(data_dir, "train", "oracle"))
    assert labels.sum() > 0
    item = dataset[0]
    texts = [codec.decode(s) for s in item["segments"]]
    assert all(t.startswith("Current chunk:") for t in texts)
    assert any("important sentences:" in t for t in texts)
    assert all(len(s) <= 1024 for s in item["segments"])
    plain = build_awesome(data_dir, "--segmentation", "length")[1]
    plain.load_dataset("train")
    for segment, bare in zip(texts, plain.datasets["train"][0]["segments"]):
        current = segment[len("Current chunk: "):].split(" Previous important sentences:")[0]
        assert current.split(" Next important sentences:")[0] == codec.decode(bare)


def test_salient_sentences_fill_each_segment_input_up_to_max_input_tokens(prepared):
    data_dir, codec = prepared
    def inputs(*flags):
        _, task, _ = build_awesome(data_dir, "--segmentation", "length", "--salient-sentences", "oracle", *flags)
        task.load_dataset("train")
        return task.datasets["train"]
    capped, default = inputs("--max-input-tokens", "400"), inputs()
    lengths = [len(s) for i in range(len(capped)) for s in capped[i]["segments"]]
    assert max(lengths) == 400 and max(len(s) for i in range(len(default)) for s in default[i]["segments"]) > 400
    assert capped.src_sizes.tolist() == [400 * len(capped[i]["segments"]) for i in range(len(capped))]  # batching cost
    for i in range(len(capped)):  # the same chunks, with fewer salient sentences beside them
        for short, long in zip(capped[i]["segments"], default[i]["segments"]):
            chunk = codec.decode(long).split(" Previous important sentences:")[0].split(" Next important sentences:")[0]
            assert codec.decode(short).startswith(chunk)


def test_a_batch_runs_segment_by_segment_through_training(prepared):
    data_dir, _ = prepared
    args, task, model = build_awesome(data_dir, "--segmentation", "length", "--salient-sentences", "oracle")
    task.load_dataset("train")
    dataset = task.datasets["train"]
    sample = dataset.collater([dataset[0], dataset[1]])
    class Backward:
        def backward(self, loss):
            loss.backward()

    loss, size, log = task.train_step(sample, model, build_criterion(args, task), Backward(), 0)
    assert size == sample["ntokens"] and log["ndocuments"] == 2
    assert log["nsegments"] == int(dataset.segment_counts[:2].sum())
    assert torch.isfinite(loss)


def test_with_capture_training_every_training_segment_is_padded_to_the_splits_longest(prepared):
    """Its input and its target, so that batches of one size have one segment shape to capture;
    validation batches keep their own."""
    data_dir, _ = prepared
    plain = build_awesome(data_dir, "--segmentation", "length")[1]
    padded = build_awesome(data_dir, "--segmentation", "length", "--capture-training")[1]
    for task in (plain, padded):
        task.load_dataset("train")
        task.load_dataset("valid")
    train = padded.datasets["train"]
    longest = (int(train.longest_input.max()), int(train.longest_target.max()))

    def widths(task, split, index):
        dataset = task.datasets[split]
        batch = dataset.collater([dataset[index]])
        return (batch["net_input"]["src_tokens"].size(2), batch["segment_target"].size(2),
                batch["segment_prev_output_tokens"].size(2))

    assert {widths(padded, "train", i) for i in range(len(train))} == {(longest[0], longest[1], longest[1])}
    assert {widths(plain, "train", i) for i in range(len(train))} != {(longest[0], longest[1], longest[1])}
    assert all(widths(padded, "valid", i) == widths(plain, "valid", i) for i in range(len(padded.datasets["valid"])))


@pytest.mark.parametrize("max_tokens, warned", [(4000, True), (None, False)])
def test_batching_the_padded_segments_by_tokens_is_warned_against(prepared, max_tokens, warned, caplog):
    """Batches by --max-tokens vary in size, and every size is another segment shape to capture."""
    data_dir, _ = prepared
    task = build_awesome(data_dir, "--segmentation", "length", "--capture-training")[1]
    task.load_dataset("train")
    with caplog.at_level(logging.WARNING):
        task.get_batch_iterator(task.datasets["train"], max_tokens=max_tokens, max_sentences=2)
    assert ("give --batch-size alone" in caplog.text) == warned


def test_documents_are_cut_to_their_leading_segments_within_the_token_budget(prepared):
    data_dir, _ = prepared
    full = build_awesome(data_dir, "--segmentation", "length")[1]
    full.load_dataset("train")
    sizes = [len(s) - 2 for s in full.datasets["train"][0]["segments"]]
    budget = sizes[0] + sizes[1] + 1  # two segments fit, three do not
    cut = build_awesome(data_dir, "--segmentation", "length", "--max-document-tokens", str(budget))[1]
    cut.load_dataset("train")
    item = cut.datasets["train"][0]
    assert len(item["segments"]) == len(item["segment_targets"]) == 2
    assert all(torch.equal(a, b) for a, b in zip(item["segments"], full.datasets["train"][0]["segments"]))


@pytest.mark.parametrize("salient", ["none", "oracle"])
def test_a_raw_document_is_read_as_the_stored_one(prepared, salient):
    """What summarize() feeds the model for a text equals what the dataset feeds it."""
    data_dir, codec = prepared
    _, task, model = build_awesome(data_dir, "--segmentation", "length", "--salient-sentences", salient)
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    units = slice(dataset.corpus.structure.example_units[0], dataset.corpus.structure.example_units[1])
    labels = None if salient == "none" else dataset.salient[units]
    inputs = task.document_inputs(dataset.corpus.document(0), labels)
    assert [i.tolist() for i in inputs] == [s.tolist() for s in dataset[0]["segments"]]


def test_summarizing_with_the_task_generator_equals_generate_on_the_stored_document(prepared):
    data_dir, codec = prepared
    args, task, model = build_awesome(data_dir, "--segmentation", "length")
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    generator = task.sequence_generator_cls([model], task.dictionary, beam_size=2, max_len_b=6)
    pages = [[torch.from_numpy(i) for i in task.document_inputs(dataset.corpus.document(k))] for k in range(2)]
    summarized = generator.generate([model], {"net_input": {"src_tokens": collate_pages(pages, task.dictionary.pad())}})
    stored = task.inference_step(generator, [model], dataset.collater([dataset[0], dataset[1]]))
    assert [h[0]["tokens"].tolist() for h in summarized] == [h[0]["tokens"].tolist() for h in stored]


@pytest.mark.parametrize("flags", [["--view", "spatial"], ["--num-pages", "3"], ["--max-page-tokens", "64"],
                                   ["--max-source-tokens", "512", "--placeholder-pages"]])
def test_a_page_view_setting_that_the_segments_would_ignore_is_refused_in_one_line(prepared, flags):
    with pytest.raises(SettingError) as refused:
        build_awesome(prepared[0], "--segmentation", "length", *flags)
    message = str(refused.value)
    assert message.startswith("segmented_summarization reads the segments that pagesum-awesome-segment cut")
    assert all(flag in message for flag in flags if flag.startswith("--")) and "\n" not in message
    assert build_awesome(prepared[0], "--segmentation", "length", "--view", "segments")[1].view.view == "segments"


def test_a_segment_longer_than_the_models_positions_is_refused_naming_the_setting_that_cuts_it(prepared):
    args, task, model = build_awesome(prepared[0], "--segmentation", "length", "--max-source-positions", "64")
    task.load_dataset("train")
    positions = utils.resolve_max_positions(task.max_positions(), model.max_positions())
    with pytest.raises(SettingError) as refused:
        task.get_batch_iterator(dataset=task.datasets["train"], max_sentences=2, max_positions=positions)
    assert "cut them to fit with --max-input-tokens and --max-summary-tokens" in str(refused.value)


def test_label_labels_the_splits_it_is_given_in_the_processes_it_is_given(tmp_path, monkeypatch):
    data_dir = str(tmp_path)
    write_text_corpus(data_dir, {"train": paper_examples(2, offset=30, sentences=8),
                                 "valid": paper_examples(1, offset=32, sentences=8)})
    asked, label_split = [], label_cli.label_split

    def recording(data, split, workers):
        asked.append((split, workers))
        return label_split(data, split, workers)

    monkeypatch.setattr(label_cli, "label_split", recording)
    assert label_cli.main([data_dir, "--splits", "train", "--workers", "2"]) == 0
    assert asked == [("train", 2)]
    assert os.path.exists(salient_path(data_dir, "train", "oracle"))
    assert not os.path.exists(salient_path(data_dir, "valid", "oracle"))
