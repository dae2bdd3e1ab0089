"""The salient-sentence extractor: sentence vectors, self-attention over them, a one-hidden-layer
MLP, trained on oracle labels, fine-tuned from a BART checkpoint."""

import numpy as np
import pytest
import torch
from fairseq.criterions import build_criterion

from builders.awesome import build_extractor, paper_examples, write_text_corpus
from builders.models import bart_twin, build_tiny
from pagesum_plugin.systems.awesome import label as label_cli
from pagesum_plugin.systems.awesome.cache import salient_path


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("awesome_labelled"))
    papers = paper_examples(3, offset=20, sentences=12)
    write_text_corpus(data_dir, {"train": papers[:2], "valid": papers[2:]})
    assert label_cli.main([data_dir, "--workers", "1"]) == 0
    return data_dir


def test_every_sentence_gets_a_score_from_the_mean_of_its_final_states(labelled):
    args, task, model = build_extractor(labelled)
    model.eval()
    task.load_dataset("train")
    dataset = task.datasets["train"]
    sample = dataset.collater([dataset[0], dataset[1]])
    logits, padding = model(**sample["net_input"])
    counts = sample["net_input"]["sentence_counts"]
    assert logits.shape == padding.shape == (2, int(counts.max()))
    assert (~padding).sum(1).tolist() == counts.tolist()
    # a sentence's vector is the mean over its own tokens: padding it further changes nothing
    src = sample["net_input"]["src_tokens"]
    wider = torch.cat([src, src.new_full((src.size(0), 5), task.dictionary.pad())], dim=1)
    torch.testing.assert_close(model.sentence_vectors(wider), model.sentence_vectors(src), atol=1e-5, rtol=0)
    # sentences see one another: changing one sentence changes the others' scores
    other = src.clone()
    other[0, 1:3] = task.dictionary.nspecial + 3
    changed, _ = model(other, counts)
    assert not torch.allclose(changed[0, 1:counts[0]], logits[0, 1:counts[0]])


def test_the_loss_is_binary_cross_entropy_against_the_oracle_labels(labelled):
    args, task, model = build_extractor(labelled)
    task.load_dataset("train")
    dataset = task.datasets["train"]
    sample = dataset.collater([dataset[0], dataset[1]])
    criterion = build_criterion(args, task)
    loss, size, log = criterion(model, sample)
    labels = np.load(salient_path(labelled, "train", "oracle"))
    assert size == len(labels) == len(sample["target"])
    assert torch.equal(sample["target"], torch.from_numpy(labels.astype(np.float32)))
    logits, padding = model(**sample["net_input"])
    expected = torch.nn.functional.binary_cross_entropy_with_logits(logits[~padding], sample["target"], reduction="sum")
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert model.head.out.weight.grad is not None and model.encoder.layers[0].fc1.weight.grad is not None
    assert log["gold"] == int(labels.sum())


def test_fine_tuning_starts_from_a_bart_checkpoint(labelled):
    args, task, model = build_extractor(labelled)
    bart_args, bart_task, pagesum = build_tiny(labelled)
    bart = bart_twin(bart_args, bart_task, pagesum)
    state = dict(bart.state_dict())
    embeddings = state["encoder.embed_tokens.weight"]
    state["encoder.embed_tokens.weight"] = torch.cat([embeddings, embeddings[:1]])  # BART's extra <mask> row
    model.load_state_dict(state, strict=True)  # the decoder is dropped, the scorer starts fresh
    for key, value in model.encoder.state_dict().items():
        assert torch.equal(value, bart.encoder.state_dict()[key]), key


def test_the_scoring_mlp_has_extractor_hidden_dim_units_and_by_default_the_model_width(labelled):
    _, _, narrow = build_extractor(labelled, "--extractor-hidden-dim", "24")
    assert (narrow.head.hidden.out_features, narrow.head.out.in_features) == (24, 24)
    args, _, default = build_extractor(labelled)
    assert default.head.hidden.out_features == args.encoder_embed_dim != 24


def test_every_sentence_is_cut_to_max_sentence_tokens_with_its_end_marker(labelled):
    def rows(*flags):
        _, task, _ = build_extractor(labelled, *flags)
        task.load_dataset("train")
        dataset = task.datasets["train"]
        return dataset.collater([dataset[0], dataset[1]])["net_input"]["src_tokens"], task.dictionary
    cut, dictionary = rows("--max-sentence-tokens", "8")
    full, _ = rows()
    assert cut.size(1) == 8 < full.size(1)
    ends = cut.ne(dictionary.pad()).sum(1) - 1
    assert cut.gather(1, ends[:, None]).eq(dictionary.eos()).all()
    assert torch.equal(cut[:, :7], full[:, :7])  # the same sentences, in order, cut
