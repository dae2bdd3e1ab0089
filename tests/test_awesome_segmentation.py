"""Algorithm 1 (document segmentation), its cache in the data directory and the view
hook that reads it."""

import json
import zlib

import numpy as np
import pytest

from builders.awesome import paper_examples, write_text_corpus
from builders.paged_data import document_of_pages
from pagesum_plugin.systems.awesome import segment as segment_cli
from pagesum_plugin.systems.awesome.cache import embeddings_path, load_segmentation, segments_path
from pagesum_plugin.systems.awesome.segmentation import model_tag, opens_new_segment, segment_sentences
from pagesum_plugin.corpus.codec import TextCodec, unit_texts
from pagesum_plugin.corpus.format import SplitStructure
from pagesum_plugin.corpus.storage import CorpusSplit
from pagesum_plugin.corpus.views import ViewConfig, assemble_pages, plan_pages

A, B, C = np.array([3.0, 0.0, 0.0]), np.array([0.0, 2.0, 0.0]), np.array([0.0, 0.0, 1.0])  # cosine 0 between topics


def test_a_sentence_opens_a_segment_when_it_is_closer_to_what_follows():
    unit = np.eye(3)
    assert opens_new_segment(unit[1], current=unit[[0, 0]], pseudo_next=unit[[1, 2]])  # 1/2 > 0
    assert not opens_new_segment(unit[0], current=unit[[0, 1]], pseudo_next=unit[[0, 2]])  # 1/2 = 1/2: stays
    assert not opens_new_segment(unit[1], current=unit[[0]], pseudo_next=unit[:0])  # nothing follows


def test_algorithm_1_on_a_document_with_known_similarities():
    # A A | B B B B | A A, five tokens a sentence, segments of 10-30 tokens
    embeddings = np.stack([A, A, B, B, B, B, A, A])
    ids = segment_sentences(np.full(8, 5), embeddings, min_tokens=10, max_tokens=30)
    # 2: B is unlike [A A] and like the pseudo-segment [B B] -> cut. 3: below 10 tokens -> joins.
    # 4, 5: like [B ...] more than [B A] / [A A] -> join. 6: unlike [B B B B], like [A] -> cut.
    assert ids.tolist() == [0, 0, 1, 1, 1, 1, 2, 2]


def test_the_length_rule_alone_fills_segments_to_the_maximum():
    assert segment_sentences(np.full(8, 5), None, min_tokens=10, max_tokens=30).tolist() == [0] * 6 + [1] * 2


def test_below_the_minimum_a_sentence_joins_although_what_follows_is_closer():
    # [A] holds 7 < 10 tokens: B joins it although the pseudo-segment [B] is more like B
    ids = segment_sentences(np.array([7, 7, 7]), np.stack([A, B, B]), min_tokens=10, max_tokens=100)
    assert ids.tolist() == [0, 0, 0]


def test_a_sentence_that_would_exceed_the_maximum_opens_a_segment_although_it_is_alike():
    ids = segment_sentences(np.array([8, 8, 8]), np.stack([A, A, A]), min_tokens=1, max_tokens=20)
    assert ids.tolist() == [0, 0, 1]


def test_a_segment_opening_with_its_plain_first_word_is_counted_as_the_view_counts_it():
    ids = segment_sentences(np.array([5, 5, 5]), None, min_tokens=1, max_tokens=11, opening_lengths=np.array([6, 6, 6]))
    assert ids.tolist() == [0, 0, 1]  # 6 + 5 fits in 11, 6 + 5 + 5 does not


@pytest.mark.parametrize("seed", range(5))
def test_every_cut_is_forced_by_the_maximum_or_made_after_the_minimum(seed):
    rng = np.random.RandomState(seed)
    lengths = rng.randint(1, 40, size=60)
    ids = segment_sentences(lengths, rng.randn(60, 8), min_tokens=50, max_tokens=100)
    assert ids[0] == 0 and set(np.diff(ids)) <= {0, 1}
    for segment in range(ids[-1] + 1):
        size = lengths[ids == segment].sum()
        assert size <= 100 or (ids == segment).sum() == 1
        after = np.flatnonzero(ids == segment)[-1] + 1
        if after < len(ids):  # a cut: either the next sentence did not fit, or the minimum was reached
            assert size + lengths[after] > 100 or size >= 50


@pytest.mark.parametrize("seed", range(3))
def test_the_length_rule_is_the_segments_view_rule(seed):
    rng = np.random.RandomState(seed)
    document = document_of_pages([[7] * n for n in rng.randint(1, 30, size=40)])
    document.unit_group[:] = 0
    document.name_length = np.zeros(1, dtype=np.int64)
    plan = plan_pages(SplitStructure.of_document(document), ViewConfig("segments", max_segment_tokens=62))
    assert segment_sentences(document.unit_length, None, 1, 60).tolist() == plan.unit_stream.tolist()


def test_the_view_reads_precomputed_segments():
    document = document_of_pages([[5, 6], [7], [8, 9, 10], [11]])
    config = ViewConfig("segments")
    pages = assemble_pages(document, config, 0, 2, unit_streams=np.array([0, 0, 1, 1]))
    assert [p.tolist() for p in pages] == [[0, 5, 6, 7, 2], [0, 8, 9, 10, 11, 2]]
    assert [p.tolist() for p in assemble_pages(document, config, 0, 2)] == [[0, 5, 6, 7, 8, 9, 10, 11, 2]]
    for bad in ([0, 2, 2, 3], [1, 1, 1, 1], [0, 1, 0, 1], [0, 0, 1]):
        with pytest.raises(ValueError):
            assemble_pages(document, config, 0, 2, unit_streams=np.array(bad))
    with pytest.raises(ValueError, match="discourse"):
        assemble_pages(document, ViewConfig("discourse"), 0, 2, unit_streams=np.array([0, 0, 1, 1]))


# --------------------------------------------------------------------------- the cache


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("awesome_text"))
    papers = paper_examples(5)
    write_text_corpus(data_dir, {"train": papers[:3], "test": papers[3:]})
    return data_dir


SIZES = ["--min-tokens", "150", "--max-tokens", "300"]


def test_the_segment_command_writes_segments_and_targets_once(text_dir, capsys):
    assert segment_cli.main([text_dir, "--embedding-model", "length", *SIZES]) == 0
    assert "--segmentation length" in capsys.readouterr().out
    corpus = CorpusSplit(text_dir, "train")
    segment_ids, targets = load_segmentation(text_dir, "train", "length", len(corpus.structure.unit_length))
    info = json.loads((segments_path(text_dir, "train", "length").with_suffix(".json")).read_text())
    assert (info["min_tokens"], info["max_tokens"], info["embedding_model"]) == (150, 300, "length")
    view = ViewConfig("segments", max_segment_tokens=302)
    plan = plan_pages(corpus.structure, view)  # the view's own length rule gives the same segments
    assert segment_ids.tolist() == plan.unit_stream.tolist()
    assert np.array_equal(np.diff(targets.example_segments), plan.page_counts)
    assert not plan.page_truncated.any()


def test_an_unavailable_embedding_model_falls_back_to_the_length_rule_and_says_so(text_dir, tmp_path, capsys):
    missing = str(tmp_path / "no-such-model")
    assert segment_cli.main([text_dir, "--embedding-model", missing, "--splits", "test", *SIZES]) == 0
    out = capsys.readouterr().out
    assert "cannot be loaded" in out and "length rule alone" in out and "--segmentation length" in out
    assert segments_path(text_dir, "test", "length").exists()
    assert not segments_path(text_dir, "test", model_tag(missing)).exists()


def test_segmenting_a_split_with_embeddings_follows_the_similarities(text_dir, tmp_path):
    codec = TextCodec.from_data_dir(text_dir)
    corpus = CorpusSplit(text_dir, "train")

    def one_topic_per_ten_sentences(sentences):  # a stand-in embedding model: topics change every 10th
        texts = [t for d in range(len(corpus)) for t in unit_texts(codec, corpus.document(d))]
        return np.stack([np.eye(8)[(texts.index(s) // 10) % 8] for s in sentences])

    embeddings = segment_cli.embed_split(text_dir, "train", codec, one_topic_per_ten_sentences, tmp_path / "e.npy")
    segment_ids, targets = segment_cli.segment_split(text_dir, "train", codec, embeddings, 1, 10_000)
    first = corpus.structure.example_units
    for d in range(len(corpus)):
        ids = segment_ids[first[d]: first[d + 1]]
        position = np.arange(first[d], first[d + 1])  # split-wide sentence number: the topic is position // 10
        topic = position // 10
        opens = np.flatnonzero(np.diff(ids)) + 1  # a huge maximum: only similarity cuts
        assert set(opens) <= set(np.flatnonzero(np.diff(topic)) + 1)
        assert len(targets.of_example(d)) == ids[-1] + 1


class CountingEncoder:
    """A stand-in sentence embedding model: a fixed random vector per sentence text; counts
    how often it is loaded and how many sentences it embeds."""

    loads = 0
    sentences = 0

    def __init__(self, *args):
        CountingEncoder.loads += 1

    def __call__(self, sentences):
        CountingEncoder.sentences += len(sentences)
        return np.stack([np.random.RandomState(zlib.crc32(s.encode())).randn(8) for s in sentences]).astype(np.float32)


def test_the_sentences_are_embedded_once_per_split_and_segmenting_again_reuses_them(text_dir, monkeypatch, capsys):
    """The issue: "Cache the embeddings, so that segmentation runs once per corpus."
    Segmenting again with other lengths (Algorithm 1's l_min, l_max) reads the cached
    embeddings: no model is loaded and no sentence embedded."""
    monkeypatch.setattr(segment_cli, "sentence_encoder_or_length_rule", lambda name, *args: CountingEncoder())
    monkeypatch.setattr(CountingEncoder, "loads", 0)
    monkeypatch.setattr(CountingEncoder, "sentences", 0)
    units = len(CorpusSplit(text_dir, "train").structure.unit_length)
    model = ["--embedding-model", "stand-in", "--splits", "train"]

    assert segment_cli.main([text_dir, *model, "--min-tokens", "20", "--max-tokens", "300"]) == 0
    assert (CountingEncoder.loads, CountingEncoder.sentences) == (1, units)
    cache = embeddings_path(text_dir, "train", "stand-in")
    assert np.load(cache).dtype == np.float16 and np.load(cache).shape == (units, 8)
    first, _ = load_segmentation(text_dir, "train", "stand-in", units)
    capsys.readouterr()

    assert segment_cli.main([text_dir, *model, "--min-tokens", "150", "--max-tokens", "300"]) == 0
    assert (CountingEncoder.loads, CountingEncoder.sentences) == (1, units), "the encoder ran again"
    assert "read from the cache" in capsys.readouterr().out
    second, _ = load_segmentation(text_dir, "train", "stand-in", units)
    assert json.loads(segments_path(text_dir, "train", "stand-in").with_suffix(".json").read_text())["min_tokens"] == 150
    assert not np.array_equal(first, second)  # other lengths, other segments

    # the cached float16 values are what the segments come from: embedding again gives the same
    assert segment_cli.main([text_dir, *model, "--min-tokens", "150", "--max-tokens", "300",
                             "--no-embedding-cache"]) == 0
    assert (CountingEncoder.loads, CountingEncoder.sentences) == (2, 2 * units)
    assert np.array_equal(load_segmentation(text_dir, "train", "stand-in", units)[0], second)


def test_device_and_batch_size_reach_the_sentence_embedding_model(text_dir, monkeypatch):
    loaded = []
    monkeypatch.setattr(segment_cli, "sentence_encoder_or_length_rule",
                        lambda name, report, *settings: loaded.append((name, *settings)) or CountingEncoder())
    assert segment_cli.main([text_dir, "--embedding-model", "stand-in", "--splits", "test", "--no-embedding-cache",
                             "--device", "cpu", "--batch-size", "7"]) == 0
    assert loaded == [("stand-in", "cpu", 7)]


def test_cached_embeddings_of_another_model_are_not_read(text_dir, monkeypatch):
    monkeypatch.setattr(segment_cli, "sentence_encoder_or_length_rule", lambda name, *args: CountingEncoder())
    monkeypatch.setattr(CountingEncoder, "loads", 0)
    assert segment_cli.main([text_dir, "--embedding-model", "stand-in", "--splits", "test"]) == 0
    assert segment_cli.cached_embeddings(text_dir, "test", "stand-in") is not None
    assert segment_cli.cached_embeddings(text_dir, "test", "other/stand-in") is None  # same tag, another model
    assert segment_cli.main([text_dir, "--embedding-model", "other/stand-in", "--splits", "test"]) == 0
    assert CountingEncoder.loads == 2


@pytest.mark.slow
def test_the_offline_embedding_model_segments_a_corpus(text_dir, capsys):
    assert segment_cli.main([text_dir, "--splits", "test", *SIZES]) == 0
    assert "--segmentation all-minilm-l6-v2" in capsys.readouterr().out
    corpus = CorpusSplit(text_dir, "test")
    segment_ids, _ = load_segmentation(text_dir, "test", "all-minilm-l6-v2", len(corpus.structure.unit_length))
    plan = plan_pages(corpus.structure, ViewConfig("segments", max_segment_tokens=302), segment_ids)
    assert plan.page_counts.min() >= 2 and not plan.page_truncated.any()
