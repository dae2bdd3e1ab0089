"""How the segments' summaries make a document's summary (Sec. 3 and Appendix A.2 of the
AWESOME paper, ../shared/papers/awesome_memory_segments.txt): "the final summary is the
concatenation of the summaries of all segments", and a segment to which no reference
sentence was assigned has an empty target, so the model learns to end its summary at
once and the document's summary skips it. Real text, with a byte-level GPT-2 BPE trained
on it (``builders/bpe.py``), since where spaces go is a property of the BPE."""

import argparse

import numpy as np
import pytest
import torch
from fairseq.criterions import build_criterion

from builders.awesome import build_awesome, segment_sample, write_text_corpus
from builders.systems import build_system
from pagesum_plugin.systems.awesome import segment as segment_cli
from pagesum_plugin.systems.awesome.targets import example_targets, segment_summary_ids
from pagesum_plugin.corpus.readers import example_from_raw
from pagesum_plugin.systems.awesome.generator import SegmentSequenceGenerator
from pagesum_plugin.systems.awesome.memory import SegmentMemory

AGENCY = ["The agency reviewed the budget and found large deficits in the clinics.",
          "The agency agreed to audit the clinics every year from now on."]
VETERANS = ["Veterans wait a long time for care at the rural clinics.",
            "Hospitals reported long waiting times for the veterans."]
SCHOOLS = ["Schools in the district hired forty new teachers this fall.",
           "The new teachers will teach science and math to older students."]
WEATHER = ["Rain fell on the northern coast for a whole week in May.",
           "Farmers harvested their wheat before the storm arrived."]
TWO_TOPICS = dict(id="two_topics", text=" ".join(AGENCY + VETERANS),
                  summary="The agency agreed to audit. Veterans wait long.")
ONE_TOPIC = dict(id="one_topic", text=" ".join(SCHOOLS + WEATHER),  # nothing of the weather is summarized
                 summary="Schools hired new teachers.")
# Two sentences a segment for both documents: with these sizes the length rule cuts each in half.
HALVES = ["--embedding-model", "length", "--min-tokens", "1", "--max-tokens", "26"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A data directory of the two documents, segmented in halves: (data_dir, codec)."""
    data_dir = str(tmp_path_factory.mktemp("awesome_summaries"))
    codec = write_text_corpus(data_dir, {"train": [TWO_TOPICS, ONE_TOPIC]})
    assert segment_cli.main([data_dir, *HALVES]) == 0
    return data_dir, codec


def encoded(codec, example):
    return codec.encode_document(example_from_raw(example["text"], example["id"], example["summary"]))


def scripted_generator(model, dictionary, summaries):
    """The task's segment-by-segment generator whose beam search of segment t returns
    ``summaries[t]`` (content ids, one document) as its best hypothesis: what is left to
    test is how the segments' hypotheses become the document's."""
    generator = SegmentSequenceGenerator([model], dictionary, beam_size=2, max_len_b=8)
    bos, eos = dictionary.bos(), dictionary.eos()
    calls = iter(summaries)

    def search(model, segment, memory):
        tokens = torch.tensor([bos, *next(calls), eos])
        return [[{"tokens": tokens, "score": torch.tensor(0.0), "positional_scores": torch.zeros(len(tokens)),
                  "attention": None, "alignment": torch.empty(0), "page_weights": None}]]

    generator._search_segment = search
    return generator


# --------------------------------------------------------------------------- gap 1: spaces


def test_the_summaries_of_two_segments_decode_joined_by_a_single_space(corpus):
    """Each reference sentence goes to its segment (Appendix A.2); the segments' targets,
    concatenated as the decoder concatenates its segment summaries, read as the reference."""
    _, codec = corpus
    targets, assignment = example_targets(codec, encoded(codec, TWO_TOPICS), np.array([0, 0, 1, 1]),
                                          TWO_TOPICS["summary"])
    assert assignment.tolist() == [0, 1]
    assert [codec.decode(t) for t in targets] == ["The agency agreed to audit.", "Veterans wait long."]
    assert codec.decode(np.concatenate(targets)) == "The agency agreed to audit. Veterans wait long."


def test_every_segment_target_starts_with_the_leading_space_form_of_its_first_word(corpus):
    """With GPT-2's BPE, "Veterans" and " Veterans" are different tokens: a segment's summary
    that followed another without its space would run into it ("audit.Veterans")."""
    _, codec = corpus
    targets, _ = example_targets(codec, encoded(codec, TWO_TOPICS), np.array([0, 0, 1, 1]), TWO_TOPICS["summary"])
    assert targets[1][0] == codec.ids(" Veterans")[0] != codec.ids("Veterans")[0]
    assert targets[0][0] == codec.ids(" The")[0]  # the first segment too: a segment never knows it is first
    # the concatenated targets are exactly the ids of the summary as one text
    assert np.concatenate(targets).tolist() == codec.ids(" " + TWO_TOPICS["summary"]).tolist()
    assert segment_summary_ids(codec, "  ").tolist() == []  # an empty summary has no ids, not a space


def test_the_cached_targets_concatenate_into_the_reference_with_single_spaces(corpus):
    data_dir, codec = corpus
    _, task, _ = build_awesome(data_dir, "--segmentation", "length")
    task.load_dataset("train")
    dataset = task.datasets["train"]
    assert dataset.segment_counts.tolist() == [2, 2]
    bos, eos = task.dictionary.bos(), task.dictionary.eos()
    for index, example in enumerate([TWO_TOPICS, ONE_TOPIC]):
        item = dataset[index]
        joined = torch.cat([t[1:-1] for t in item["segment_targets"]])  # as the generator joins them
        assert codec.decode(torch.cat([joined.new_tensor([bos]), joined, joined.new_tensor([eos])])) == \
            example["summary"]


def test_decoding_joins_the_segment_summaries_with_single_spaces(corpus):
    data_dir, codec = corpus
    _, task, model = build_awesome(data_dir, "--segmentation", "length")
    task.load_dataset("train")
    sample = task.datasets["train"].collater([task.datasets["train"][0]])
    summaries = [segment_summary_ids(codec, "The agency agreed to audit."),
                 segment_summary_ids(codec, "Veterans wait long.")]
    best = scripted_generator(model, task.dictionary, summaries).generate([model], sample)[0][0]
    assert codec.decode(best["tokens"]) == "The agency agreed to audit. Veterans wait long."


# --------------------------------------------------------------------------- gap 4: empty targets


def test_a_segment_without_reference_sentences_has_the_target_bos_eos(corpus):
    """Appendix A.2: a segment that no reference sentence goes to has an empty target; in
    training its decoder reads ``</s> <s>`` and learns ``<s> </s>``: to end at once."""
    data_dir, codec = corpus
    _, task, _ = build_awesome(data_dir, "--segmentation", "length")
    task.load_dataset("train")
    dataset = task.datasets["train"]
    bos, eos = task.dictionary.bos(), task.dictionary.eos()
    assert [len(t) for t in dataset.targets.of_example(1)] == [len(codec.ids(" " + ONE_TOPIC["summary"])), 0]
    item = dataset[1]
    assert item["segment_targets"][1].tolist() == [bos, eos]
    sample = dataset.collater([item])
    step = list(task.segment_steps(sample, SegmentMemory()))[1]
    assert step["target"].tolist() == [[bos, eos]] and step["net_input"]["prev_output_tokens"].tolist() == [[eos, bos]]
    assert step["ntokens"] == 2


def test_a_segment_with_an_empty_target_trains_to_emit_just_eos_and_the_summary_skips_it(corpus):
    """Trained on its segments with the task's own train_step, the model ends the summary
    of the weather segment at once (``<s> </s>``), and the document's summary is the schools
    segment's summary alone: no stray token, no trailing space."""
    data_dir, codec = corpus
    args, task, model = build_awesome(data_dir, "--segmentation", "length", "--memory", "attentive")
    task.load_dataset("train")
    dataset = task.datasets["train"]
    sample = dataset.collater([dataset[0], dataset[1]])
    criterion = build_criterion(args, task)
    adam = torch.optim.Adam(model.parameters(), lr=1e-2)

    class Backward:  # what train_step needs of fairseq's optimizer
        def backward(self, loss):
            loss.backward()

    torch.manual_seed(0)
    for update in range(40):
        adam.zero_grad()
        loss, _, _ = task.train_step(sample, model, criterion, Backward(), update)
        adam.step()
    model.eval()
    # the task's per-segment decoding settings: a segment's summary may be empty (--min-len 0)
    generator = task.build_generator([model], argparse.Namespace(**{**task.generation_defaults.as_kwargs(),
                                                                   "beam": 2, "max_len_b": 24}))
    hypos = generator.generate([model], dataset.collater([dataset[1]]))
    best = hypos[0][0]
    bos, eos = task.dictionary.bos(), task.dictionary.eos()
    assert best["segments"][1].tolist() == [bos, eos], "the weather segment's summary must be empty"
    assert best["tokens"].tolist() == best["segments"][0].tolist()  # nothing added for the empty segment
    assert codec.decode(best["tokens"]) == ONE_TOPIC["summary"]


def test_an_empty_segment_summary_is_skipped_without_a_double_space_or_stray_token(corpus):
    data_dir, codec = corpus
    _, task, model = build_awesome(data_dir, "--segmentation", "length", "--memory", "attentive")
    bos, eos = task.dictionary.bos(), task.dictionary.eos()
    first, last = segment_summary_ids(codec, "The agency agreed to audit."), segment_summary_ids(codec, "Veterans wait long.")
    low = task.dictionary.nspecial
    sample = segment_sample([[[low + 1] * 5, [low + 2] * 5, [low + 3] * 5]], [[[], [], []]], task.dictionary)
    best = scripted_generator(model, task.dictionary, [first, [], last]).generate([model], sample)[0][0]
    assert best["tokens"].tolist() == [bos, *first.tolist(), *last.tolist(), eos]
    assert len(best["positional_scores"]) == len(best["tokens"])
    assert codec.decode(best["tokens"]) == "The agency agreed to audit. Veterans wait long."
    assert [t.tolist() for t in best["segments"]][1] == [bos, eos]


@pytest.mark.parametrize("lenpen", [0.5, 2.0])
def test_the_joined_summarys_score_is_its_tokens_score_over_its_length_to_the_length_penalty(copy_task_dir, lenpen):
    """A document's hypothesis joins its segments' best: the forced <s>, every segment's words,
    the last </s>; its score is the sum of those tokens' scores over length ** --lenpen."""
    generator = build_system("awesome", copy_task_dir).generator(len_penalty=lenpen)
    parts = [{"tokens": torch.tensor([0, 5, 6, 2]), "positional_scores": torch.tensor([-0.1, -0.2, -0.3, -0.4])},
             {"tokens": torch.tensor([0, 7, 2]), "positional_scores": torch.tensor([-0.5, -0.6, -0.7])}]
    joined = generator._join(parts)
    assert joined["tokens"].tolist() == [0, 5, 6, 7, 2]
    kept = torch.tensor([-0.1, -0.2, -0.3, -0.6, -0.7])
    torch.testing.assert_close(joined["positional_scores"], kept)
    torch.testing.assert_close(joined["score"], kept.sum() / 5 ** lenpen)
