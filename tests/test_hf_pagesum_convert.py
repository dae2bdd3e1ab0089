"""pagesum-convert both ways with pagesum_plugin.hf: ``to-hf`` writes a PageSum checkpoint as a
PageSumForConditionalGeneration directory and a full-attention HEPOS checkpoint as a plain BART one; ``from-hf``
reads a PageSum directory back into the same fairseq checkpoint, every field and weight."""

import json

import pytest
import torch
import transformers

from builders.models import build_tiny, paged_batch
from pagesum_plugin.checkpoints.builder import checkpoint_state
from pagesum_plugin.checkpoints.convert import main
from pagesum_plugin.checkpoints.hf_config import BART_CONFIG_FIELDS, PAGESUM_CONFIG_FIELDS
from pagesum_plugin.checkpoints.safety import load_checkpoint_file
from pagesum_plugin.hf import PageSumConfig, PageSumForConditionalGeneration

pytestmark = pytest.mark.usefixtures("one_thread")


def test_pagesum_config_adds_only_the_fields_the_converter_places():
    added = set(PageSumConfig().to_dict()) - set(transformers.BartConfig().to_dict())
    assert added == set(PAGESUM_CONFIG_FIELDS)


def test_to_hf_writes_a_pagesum_model_that_from_hf_reads_back_whole(copy_task_dir, tmp_path):
    args, _, model = build_tiny(copy_task_dir, "--label-smoothing", "0.2", "--encoder-ffn-embed-dim", "96",
                                "--decoder-attention-heads", "2", "--activation-fn", "relu")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    torch.save(checkpoint_state(args, model), tmp_path / "model.pt")
    main(["to-hf", str(tmp_path / "model.pt"), str(tmp_path / "hf"), "--data", copy_task_dir])
    assert (tmp_path / "hf" / "model.safetensors").exists()
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["model_type"] == "pagesum" and config["label_smoothing"] == 0.2
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "hf")).eval()
    assert type(hf) is PageSumForConditionalGeneration

    src = paged_batch([[[5, 6, 7], [8, 9]], [[10, 11, 12, 13]]], model.encoder.dictionary)
    prev = torch.tensor([[2, 0, 5, 6], [2, 0, 7, 8]])
    with torch.no_grad():
        expected, _ = model(src, None, prev)
        torch.testing.assert_close(hf(input_ids=src, decoder_input_ids=prev).logits, expected, atol=1e-5, rtol=0)

    main(["from-hf", str(tmp_path / "hf"), str(tmp_path / "back")])
    back = load_checkpoint_file(str(tmp_path / "back" / "model.pt"))
    for key, value in model.state_dict().items():
        assert torch.equal(back["model"][key], value), key
    assert back["cfg"]["criterion"]["label_smoothing"] == 0.2
    main(["to-hf", str(tmp_path / "back" / "model.pt"), str(tmp_path / "again")])
    again = json.loads((tmp_path / "again" / "config.json").read_text())
    fields = BART_CONFIG_FIELDS["converted"] | BART_CONFIG_FIELDS["checked"] | set(PAGESUM_CONFIG_FIELDS)
    assert {k: again[k] for k in fields if k in config} == {k: config[k] for k in fields if k in config}


# every field that the converter converts, at a value other than its default, and the criterion's settings
CONFIG_VALUES = dict(vocab_size=72, d_model=24, encoder_layers=3, decoder_layers=1, encoder_attention_heads=3,
                     decoder_attention_heads=6, encoder_ffn_dim=40, decoder_ffn_dim=48, max_position_embeddings=40,
                     activation_function="relu", dropout=0.3, attention_dropout=0.2, activation_dropout=0.1,
                     encoder_layerdrop=0.05, decoder_layerdrop=0.15, scale_embedding=True, tie_word_embeddings=True,
                     label_smoothing=0.25, loss_chunk_tokens=16)


def test_every_field_of_a_pagesum_directory_round_trips(tmp_path):
    assert set(CONFIG_VALUES) == BART_CONFIG_FIELDS["converted"] | set(PAGESUM_CONFIG_FIELDS)
    torch.manual_seed(0)
    model = PageSumForConditionalGeneration(PageSumConfig(**CONFIG_VALUES))
    with torch.no_grad():
        model.model.page_confidence.weight.normal_()
    model.save_pretrained(str(tmp_path / "hf"))
    main(["from-hf", str(tmp_path / "hf"), str(tmp_path / "fairseq")])
    main(["to-hf", str(tmp_path / "fairseq" / "model.pt"), str(tmp_path / "back")])
    back = PageSumForConditionalGeneration.from_pretrained(str(tmp_path / "back"))
    assert {k: getattr(back.config, k) for k in CONFIG_VALUES} == CONFIG_VALUES
    original = model.state_dict()
    assert set(back.state_dict()) == set(original)
    for key, value in back.state_dict().items():
        assert torch.equal(value, original[key]), key


def test_a_hepos_checkpoint_with_full_attention_becomes_bart(copy_task_dir, tmp_path):
    args, _, model = build_tiny(copy_task_dir, "--encoder-attention", "full", "--cross-attention", "full",
                                arch="hepos_tiny")
    torch.save(checkpoint_state(args, model), tmp_path / "model.pt")
    main(["to-hf", str(tmp_path / "model.pt"), str(tmp_path / "hf")])
    bart = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "hf")).eval()
    assert type(bart) is transformers.BartForConditionalGeneration
    src = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 9, 10, 2, 1, 1]])  # the flat view: one sequence per example
    prev = torch.tensor([[2, 0, 5, 6], [2, 0, 7, 8]])
    with torch.no_grad():
        expected, _ = model(src.unsqueeze(1), None, prev)
        logits = bart(input_ids=src, attention_mask=src.ne(1), decoder_input_ids=prev).logits
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch, flags, refusal", [
    ("hepos_tiny", ["--cross-attention", "hepos"], "neither a PageSum model nor a HEPOS model with full attention"),
    ("pagesum_tiny", ["--page-decoding", "global"], "--page-decoding global has no transformers model"),
])
def test_models_transformers_cannot_express_are_refused(copy_task_dir, tmp_path, arch, flags, refusal):
    args, _, model = build_tiny(copy_task_dir, *flags, arch=arch)
    torch.save(checkpoint_state(args, model), tmp_path / "model.pt")
    with pytest.raises(SystemExit, match=refusal):
        main(["to-hf", str(tmp_path / "model.pt"), str(tmp_path / "hf")])
    assert not (tmp_path / "hf").exists()
