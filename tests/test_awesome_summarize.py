"""``summarize()`` on AWESOME models: a raw document is segmented as the training data was
and, for a model trained with global salient content (Sec. 3.2 of the AWESOME paper,
../shared/papers/awesome_memory_segments.txt: "Current chunk: ... Previous important
sentences: ... Next important sentences: ..."), every segment's input carries the salient
sentences that the trained extractor picks (Appendix D) or that the caller gives. Without
either, such a model is refused, in one line that says what to pass."""

import argparse
import os
import shutil

import numpy as np
import pytest
import torch

from builders.awesome import build_awesome, build_extractor, paper_examples, save_checkpoint, write_text_corpus
from pagesum_plugin import from_pretrained
from pagesum_plugin.systems.awesome import extract as extract_cli
from pagesum_plugin.systems.awesome import label as label_cli
from pagesum_plugin.systems.awesome import segment as segment_cli
from pagesum_plugin.systems.awesome.cache import load_salient, salient_path
from pagesum_plugin.corpus.storage import CorpusSplit
from pagesum_plugin.corpus.readers import example_from_raw
from pagesum_plugin.systems.awesome.extraction_criterion import sentence_probabilities
from pagesum_plugin.hub_interface import PageSumHubInterface
from pagesum_plugin.systems.awesome.extraction_task import SalientExtractor, predict_split

GEN = dict(beam=2, lenpen=1.0, min_len=0, max_len_b=6, no_repeat_ngram_size=0)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Segmented (length rule) and oracle-labelled papers: (data_dir, valid texts)."""
    data_dir = str(tmp_path_factory.mktemp("awesome_summarize"))
    papers = paper_examples(4, offset=50, sentences=16)
    write_text_corpus(data_dir, {"train": papers[:2], "valid": papers[2:]})
    assert segment_cli.main([data_dir, "--embedding-model", "length", "--min-tokens", "100", "--max-tokens", "200"]) == 0
    assert label_cli.main([data_dir, "--workers", "1"]) == 0
    return data_dir, [p["text"] for p in papers[2:]]


@pytest.fixture(scope="module")
def salient_model(corpus, tmp_path_factory):
    """A tiny AWESOME trained (here: built) with the oracle's salient sentences, saved as a
    checkpoint, and its hub: (args, task, model, hub)."""
    data_dir, _ = corpus
    args, task, model = build_awesome(data_dir, "--segmentation", "length", "--salient-sentences", "oracle")
    path = str(tmp_path_factory.mktemp("awesome_checkpoint") / "checkpoint_best.pt")
    save_checkpoint(path, args, model)
    return args, task, model, from_pretrained(os.path.dirname(path), "checkpoint_best.pt", data_name_or_path=data_dir)


@pytest.fixture(scope="module")
def extractor(corpus, tmp_path_factory):
    """An (untrained) tiny extractor saved as a checkpoint, its threshold the median
    probability of the first validation document's sentences, so that about half are
    salient: (path, SalientExtractor)."""
    data_dir, _ = corpus
    args, task, model = build_extractor(data_dir)
    model.eval()
    dataset = task.extraction_dataset(CorpusSplit(data_dir, "valid"))
    batch = dataset.collater([dataset[0]])
    with torch.no_grad():
        probabilities = sentence_probabilities(*model(**batch["net_input"]))
    threshold = float(probabilities.median())
    path = str(tmp_path_factory.mktemp("extractor") / "checkpoint_best.pt")
    save_checkpoint(path, args, model)
    return path, SalientExtractor(model, task, threshold=threshold)


def stored_summary(task, model, split: str, index: int) -> str:
    """What fairseq-generate decodes for stored example ``index`` of ``split`` (the task's
    dataset and generator), as text."""
    dataset = task.datasets[split]
    generator = task.build_generator([model], argparse.Namespace(**GEN))
    hypos = task.inference_step(generator, [model], dataset.collater([dataset[index]]))
    return task.codec.decode(hypos[0][0]["tokens"])


def test_a_salient_model_without_extractor_or_labels_is_refused_in_one_line(corpus, salient_model):
    _, texts = corpus
    hub = salient_model[3]
    with pytest.raises(ValueError) as refused:
        hub.summarize(texts[0], **GEN)
    message = str(refused.value)
    assert "\n" not in message
    assert "--salient-sentences oracle" in message and "extractor=" in message and "salient=" in message


def test_summarize_with_the_oracle_labels_equals_generate_on_the_stored_document(corpus, salient_model):
    """The segment inputs carry "Current chunk: ... important sentences: ..." exactly as the
    dataset builds them, and the summary is the one fairseq-generate decodes."""
    data_dir, texts = corpus
    args, task, model, hub = salient_model
    task.load_dataset("valid")
    dataset = task.datasets["valid"]
    corpus_split = dataset.corpus
    oracle = load_salient(data_dir, "valid", "oracle", len(corpus_split.structure.unit_length))
    for index, text in enumerate(texts):
        units = slice(corpus_split.structure.example_units[index], corpus_split.structure.example_units[index + 1])
        labels = oracle[units].astype(int).tolist()
        assert len(hub.sentences(text)) == len(labels)  # one label per sentence the model reads
        pages = hub.pages(text, salient=labels)
        assert [p.tolist() for p in pages] == [s.tolist() for s in dataset[index]["segments"]]
        assert all(hub.decode(p).startswith("Current chunk:") for p in pages)
        assert hub.summarize(text, salient=labels, **GEN) == [stored_summary(task, hub.model, "valid", index)]


def test_summarize_with_an_extractor_reads_the_sentences_the_extract_command_marks(corpus, salient_model, extractor):
    """The extractor applied to a raw document picks what ``pagesum-awesome-extract``
    writes for the stored one; the summary is then the one for those labels."""
    data_dir, texts = corpus
    hub = salient_model[3]
    _, picker = extractor
    stored = predict_split(picker.model, picker.task, "valid", picker.threshold, hub.device, batch_size=2)
    raw = [picker.predict(hub.codec.encode_document(example_from_raw(text))) for text in texts]
    assert np.concatenate(raw).tolist() == stored.astype(bool).tolist()
    assert 0 < raw[0].sum() < len(raw[0])  # some sentences salient, some not
    labels = [r.astype(int).tolist() for r in raw]
    assert hub.summarize(texts, extractor=picker, **GEN) == hub.summarize(texts, salient=labels, **GEN)


def test_summarize_loads_the_extractor_from_its_checkpoint_path(corpus, salient_model, extractor):
    _, texts = corpus
    hub = salient_model[3]
    path, picker = extractor
    default = SalientExtractor(picker.model, picker.task)  # a path gets the default threshold, 0.5
    assert hub.summarize(texts, extractor=path, **GEN) == hub.summarize(texts, extractor=default, **GEN)
    assert list(hub.task.extractors) == [path]  # loaded once, kept for later calls


def test_labels_of_the_wrong_length_are_refused(corpus, salient_model):
    _, texts = corpus
    hub = salient_model[3]
    with pytest.raises(ValueError, match="labels for a document of"):
        hub.summarize(texts[0], salient=[1, 0], **GEN)
    with pytest.raises(ValueError, match="not both"):
        hub.summarize(texts[0], salient=[0] * len(hub.sentences(texts[0])), extractor="x.pt", **GEN)


def test_a_model_without_salient_sentences_takes_neither_labels_nor_an_extractor(corpus):
    data_dir, texts = corpus
    _, task, model = build_awesome(data_dir, "--segmentation", "length")
    hub = PageSumHubInterface(task, model, data_dir)
    with pytest.raises(ValueError, match="trained without salient sentences"):
        hub.summarize(texts[0], extractor="extractor.pt", **GEN)
    task.load_dataset("valid")
    assert hub.summarize(texts[0], **GEN) == [stored_summary(task, model, "valid", 0)]


def test_extract_labels_the_splits_it_is_given_in_batches_of_the_size_given_on_the_device_given(
        corpus, extractor, tmp_path, monkeypatch):
    data_dir = str(tmp_path / "data")
    shutil.copytree(corpus[0], data_dir)
    asked, predict = [], extract_cli.predict_split

    def recording(model, task, split, threshold, device, batch_size):
        asked.append((split, device.type, batch_size))
        return predict(model, task, split, threshold, device, batch_size)

    monkeypatch.setattr(extract_cli, "predict_split", recording)
    monkeypatch.setattr(extract_cli.torch.cuda, "is_available", lambda: True)  # --cpu must win over a GPU
    assert extract_cli.main([data_dir, "--path", extractor[0], "--splits", "valid", "--batch-size", "3", "--cpu"]) == 0
    assert asked == [("valid", "cpu", 3)]
    assert os.path.exists(salient_path(data_dir, "valid", "extractor"))
    assert not os.path.exists(salient_path(data_dir, "train", "extractor"))
