"""pagesum-convert: transformers BART and PageSum authors' state dicts <-> this plugin, exactly."""

import json
import shutil

import pytest
import torch
import transformers  # a test dependency of the converter (see the README's test command)
from fairseq import checkpoint_utils
from fairseq.data import Dictionary

from builders.bpe import build_gpt2_bpe
from builders.corpora import acl_papers
from builders.models import build_tiny, make_source_sensitive, paged_batch, random_pages
from builders.paged_data import write_split
from pagesum_plugin.corpus.format import CorpusMeta
from builders.cli import USER_DIR, run_cli
from pagesum_plugin.checkpoints.safety import load_checkpoint_file
from pagesum_plugin.checkpoints.builder import checkpoint_state
from pagesum_plugin.checkpoints.convert import AUTHORS_STATE_DICT_NAME, main
from pagesum_plugin.checkpoints.hf_config import BART_CONFIG_FIELDS
from pagesum_plugin.checkpoints.hf_weights import LIN_KEYS
from pagesum_plugin.corpus.tokenizers import build_tokenizer
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.hf import PageSumForConditionalGeneration


D_MODEL = 24


# ---- fixtures: a tiny BART in transformers layout, with a real byte-level BPE tokenizer ----

@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """GPT-2-style files plus the BART-style vocab.json made from them: <s> <pad> </s> <unk>,
    then the tokens in dict.txt order, then <mask> (how bart-large's vocab.json is laid out)."""
    files = build_gpt2_bpe(tmp_path_factory.mktemp("gpt2"))
    gpt2 = json.loads(files.encoder_json.read_text(encoding="utf-8"))
    token_of = {i: t for t, i in gpt2.items()}
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for line in files.dict_txt.read_text().splitlines():
        vocab[token_of[int(line.split()[0])]] = len(vocab)
    vocab["<mask>"] = len(vocab)
    return files, vocab


def tiny_config(vocab_size, **fields):
    return transformers.BartConfig(**{
        **dict(vocab_size=vocab_size, d_model=D_MODEL, encoder_layers=2, decoder_layers=2,
               encoder_attention_heads=2, decoder_attention_heads=3, encoder_ffn_dim=40, decoder_ffn_dim=48,
               max_position_embeddings=64, dropout=0.0),
        **fields})


def random_bart(vocab_size, seed=0, **fields):
    """A BART whose every weight (layer norms, positions included) is random, bias zero;
    ``fields`` change tiny_config's."""
    torch.manual_seed(seed)
    model = transformers.BartForConditionalGeneration(tiny_config(vocab_size, **fields)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(torch.randn_like(p) * 0.2)
        model.final_logits_bias.zero_()
    return model


def write_hf_dir(path, model, bpe):
    files, vocab = bpe
    model.save_pretrained(str(path))
    (path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    shutil.copyfile(files.vocab_bpe, path / "merges.txt")
    return path


@pytest.fixture(scope="module")
def converted_bart(bpe, tmp_path_factory):
    """(transformers model, hf dir, converted dir) for a plain BART."""
    model = random_bart(len(bpe[1]))
    hf_dir = write_hf_dir(tmp_path_factory.mktemp("hf"), model, bpe)
    out = tmp_path_factory.mktemp("converted")
    main(["from-hf", str(hf_dir), str(out)])
    return model, hf_dir, out


def load_converted(out_dir):
    """Load the way fairseq-generate does (weights-only torch.load, plugin's allowlist)."""
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(out_dir / "model.pt")], arg_overrides={"data": str(out_dir)})
    return models[0].eval(), task


def dense_pages(pages, pad=1):
    """list of 1-D id tensors -> (n, max_len) right-padded."""
    width = max(len(p) for p in pages)
    out = torch.full((len(pages), width), pad, dtype=torch.long)
    for i, p in enumerate(pages):
        out[i, : len(p)] = p
    return out


def page_tensors(rng, n_pages, vocab_size):
    return [torch.tensor([0, *p, 2]) for p in random_pages(rng, n_pages, 4, vocab_size, min_len=3, max_len=15)]


# ---- plain BART ---------------------------------------------------------------------------

def test_converted_bart_log_probs_equal_transformers_bart(converted_bart):
    hf, _, out = converted_bart
    model, _ = load_converted(out)
    rng = torch.Generator().manual_seed(1)
    src = dense_pages([page for _ in range(3) for page in page_tensors(rng, 1, 400)])  # (3, L), right-padded
    prev = torch.cat([torch.tensor([[2, 0]] * 3), torch.randint(4, 400, (3, 7), generator=rng)], dim=1)
    with torch.no_grad():
        expected = hf(input_ids=src, attention_mask=src.ne(1), decoder_input_ids=prev).logits.log_softmax(-1)
        logits, extra = model(src.unsqueeze(1), src.ne(1).sum(1), prev)  # one page per example
    torch.testing.assert_close(logits.log_softmax(-1), expected, atol=1e-5, rtol=0)
    assert torch.equal(extra["page_weights"], torch.ones(3, 1, prev.size(1)))


def test_converted_checkpoint_loads_weights_only_with_explicit_dims(converted_bart):
    hf, _, out = converted_bart
    state = load_checkpoint_file(str(out / "model.pt"))  # weights-only unpickler
    model_cfg = state["cfg"]["model"]
    assert model_cfg.arch == "pagesum_bart_base"  # non-standard size: dims stored explicitly
    assert (model_cfg.encoder_embed_dim, model_cfg.encoder_ffn_embed_dim, model_cfg.decoder_ffn_embed_dim,
            model_cfg.decoder_attention_heads, model_cfg.max_source_positions) == (D_MODEL, 40, 48, 3, 64)
    assert model_cfg.no_scale_embedding and model_cfg.activation_fn == "gelu"
    # a plain BART gets a zero confidence layer: uniform page weights until fine-tuned
    for key in LIN_KEYS.values():
        assert not state["model"][key].any()


def test_page_decoding_global_converts_to_a_model_that_decodes_all_pages_at_once(converted_bart, tmp_path):
    _, hf_dir, page_out = converted_bart
    main(["from-hf", str(hf_dir), str(tmp_path), "--page-decoding", "global"])
    (page, _), (global_, _) = load_converted(page_out), load_converted(tmp_path)
    assert (page.page_decoding, global_.page_decoding) == ("page", "global")
    rng = torch.Generator().manual_seed(2)
    src = dense_pages(page_tensors(rng, 3, 400)).unsqueeze(0)  # (1, 3 pages, L)
    prev = torch.tensor([[2, 0, 7, 9]])
    with torch.no_grad():  # the same weights, read two ways: one prediction per page, or one over every page
        per_page, per_page_extra = page(src, None, prev)
        at_once, _ = global_(src, None, prev)
    assert per_page_extra["page_weights"].shape == (1, 3, 4)
    assert not torch.allclose(at_once, per_page, atol=1e-4)


def test_dictionary_index_is_the_transformers_token_id(converted_bart, bpe):
    _, hf_dir, out = converted_bart
    dictionary = Dictionary.load(str(out / "dict.txt"))
    hf_tokenizer = transformers.BartTokenizer.from_pretrained(str(hf_dir))
    assert len(dictionary) == len(bpe[1])
    assert (dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()) == (
        hf_tokenizer.bos_token_id, hf_tokenizer.pad_token_id, hf_tokenizer.eos_token_id, hf_tokenizer.unk_token_id)
    assert dictionary.index(str(hf_tokenizer.mask_token_id)) == hf_tokenizer.mask_token_id
    # The converted BPE files + dict.txt, as pagesum-preprocess uses them, give the HF ids.
    ours = build_tokenizer("gpt2", encoder_json=out / "encoder.json", vocab_bpe=out / "vocab.bpe")
    paper = acl_papers(1)[0]
    for text in [paper["summary"], paper["sections"][0]["text"][:2000], "Unicode: café 東京 🙂\tand\nlines"]:
        indices = [dictionary.index(s) for s in ours.encode(text)]
        assert indices == hf_tokenizer(text, add_special_tokens=False).input_ids
        assert dictionary.unk() not in indices


def test_gpt2_encoder_json_gives_fairseq_bart_dict_order(converted_bart, bpe, tmp_path):
    _, hf_dir, _ = converted_bart
    files, _ = bpe
    main(["from-hf", str(hf_dir), str(tmp_path), "--gpt2-encoder-json", str(files.encoder_json)])
    symbols = [line.split()[0] for line in (tmp_path / "dict.txt").read_text().splitlines()]
    bart_symbols = [line.split()[0] for line in files.dict_txt.read_text().splitlines()]
    assert symbols == bart_symbols + ["<mask>"]
    # data tokenized with the original GPT-2 files gets the same indices as the HF tokenizer
    dictionary = Dictionary.load(str(tmp_path / "dict.txt"))
    gpt2 = build_tokenizer("gpt2", encoder_json=files.encoder_json, vocab_bpe=files.vocab_bpe)
    hf_tokenizer = transformers.BartTokenizer.from_pretrained(str(hf_dir))
    text = acl_papers(1)[0]["summary"]
    assert [dictionary.index(s) for s in gpt2.encode(text)] == hf_tokenizer(text, add_special_tokens=False).input_ids


def test_tokens_without_an_embedding_row_are_reported_and_left_out(bpe, tmp_path, caplog):
    # bart-large-cnn: the tokenizer has <mask> at id 50264, the model only 50264 rows
    vocab_size = len(bpe[1]) - 1
    hf_dir = write_hf_dir(tmp_path / "hf", random_bart(vocab_size), bpe)
    main(["from-hf", str(hf_dir), str(tmp_path / "out")])
    assert "left out of dict.txt and encoder.json: ['<mask>']" in caplog.text
    assert len(Dictionary.load(str(tmp_path / "out" / "dict.txt"))) == vocab_size
    assert "<mask>" not in json.loads((tmp_path / "out" / "encoder.json").read_text())


def test_nonzero_final_logits_bias_is_refused(bpe, tmp_path):
    model = random_bart(len(bpe[1]))
    with torch.no_grad():
        model.final_logits_bias[0, 5] = 0.5
    hf_dir = write_hf_dir(tmp_path / "hf", model, bpe)
    with pytest.raises(SystemExit, match="final_logits_bias is not zero"):
        main(["from-hf", str(hf_dir), str(tmp_path / "out")])
    assert not (tmp_path / "out" / "model.pt").exists()


def test_a_conversion_that_fails_writes_no_file(bpe, tmp_path):
    model = random_bart(len(bpe[1]))
    hf_dir = write_hf_dir(tmp_path / "hf", model, bpe)
    torch.save({**model.state_dict(), "lin.weight": torch.zeros(1, D_MODEL)}, tmp_path / "half_lin.bin")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("kept\n")
    with pytest.raises(SystemExit, match="only part of the lin layer is present"):
        main(["from-hf", str(hf_dir), str(tmp_path / "out"), "--state-dict", str(tmp_path / "half_lin.bin")])
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["half_lin.bin", "hf", "out"]


def test_every_field_of_bart_config_is_converted_checked_or_without_effect():
    fields = set(transformers.BartConfig().to_dict())
    placed = set().union(*BART_CONFIG_FIELDS.values())
    assert fields - placed == set(), "a BartConfig field the converter has not reviewed"
    assert sum(map(len, BART_CONFIG_FIELDS.values())) == len(placed), "a field placed twice"


# Every BartConfig field that changes what the model computes, with values other than
# tiny_config's. Dropout and layer drop act only in training; at 1.0 they act the same way on
# every call (every unit, or every layer, dropped), so those rows compare in training mode.
# vocab_size is given relative to the tokenizer's: one row fewer (bart-large-cnn's <mask>)
# and eight rows more (padded embedding tables).
COMPUTATION_FIELDS = {
    "d_model": [30], "encoder_layers": [3], "decoder_layers": [1],
    "encoder_attention_heads": [3], "decoder_attention_heads": [6],
    "encoder_ffn_dim": [16], "decoder_ffn_dim": [16], "max_position_embeddings": [40],
    "activation_function": ["relu", "gelu_new", "gelu_pytorch_tanh", "tanh", "linear"],
    "scale_embedding": [True],
    "vocab_size": [-1, +8],
    "dropout": [1.0], "attention_dropout": [1.0], "activation_dropout": [1.0],
    "encoder_layerdrop": [1.0], "decoder_layerdrop": [1.0],
    "tie_word_embeddings": [False],
}
TRAINING_ONLY = {"dropout", "attention_dropout", "activation_dropout", "encoder_layerdrop", "decoder_layerdrop"}
# What the converter must say instead of converting: a field value fairseq BART cannot express.
REFUSED = {("tie_word_embeddings", False): "differs from model.shared.weight; fairseq BART ties the input "
                                           "embeddings and the output projection"}


def test_the_field_table_names_every_field_that_changes_the_computation():
    assert set(COMPUTATION_FIELDS) == BART_CONFIG_FIELDS["converted"]


def hf_log_probs(hf, src, prev):
    return hf(input_ids=src, attention_mask=src.ne(1), decoder_input_ids=prev).logits.log_softmax(-1)


@pytest.mark.parametrize("field, value", [(f, v) for f, values in COMPUTATION_FIELDS.items() for v in values])
def test_every_computation_field_converts_to_equal_log_probs_both_ways(bpe, tmp_path, field, value):
    vocab_size = len(bpe[1]) + (value if field == "vocab_size" else 0)
    fields = {} if field == "vocab_size" else {field: value}
    hf = random_bart(vocab_size, seed=11, **fields)
    hf_dir = write_hf_dir(tmp_path / "hf", hf, bpe)
    if (field, value) in REFUSED:
        with pytest.raises(SystemExit, match=REFUSED[field, value]):
            main(["from-hf", str(hf_dir), str(tmp_path / "out")])
        return
    main(["from-hf", str(hf_dir), str(tmp_path / "out")])
    ours, _ = load_converted(tmp_path / "out")
    main(["to-hf", str(tmp_path / "out" / "model.pt"), str(tmp_path / "back")])
    back = PageSumForConditionalGeneration.from_pretrained(str(tmp_path / "back"))

    training = field in TRAINING_ONLY
    for model in (hf, ours, back):
        model.train(training)
    rng = torch.Generator().manual_seed(1)
    src = dense_pages([page for _ in range(3) for page in page_tensors(rng, 1, len(bpe[1]) - 1)])  # (3, L)
    prev = torch.cat([torch.tensor([[2, 0]] * 3), torch.randint(4, len(bpe[1]) - 1, (3, 7), generator=rng)], dim=1)
    with torch.no_grad():
        expected = hf_log_probs(hf, src, prev)
        logits, _ = ours(src.unsqueeze(1), src.ne(1).sum(1), prev)  # one page per example
        torch.testing.assert_close(logits.log_softmax(-1), expected, atol=1e-5, rtol=0)
        back_logits = back(input_ids=src.unsqueeze(1), attention_mask=src.ne(1).unsqueeze(1), decoder_input_ids=prev).logits
        torch.testing.assert_close(back_logits.log_softmax(-1), expected, atol=1e-5, rtol=0)


def test_a_config_vocab_size_that_differs_from_the_embedding_rows_is_refused(bpe, tmp_path):
    model = random_bart(len(bpe[1]))
    hf_dir = write_hf_dir(tmp_path / "hf", model, bpe)
    config = json.loads((hf_dir / "config.json").read_text())
    (hf_dir / "config.json").write_text(json.dumps(dict(config, vocab_size=len(bpe[1]) + 8)))
    with pytest.raises(SystemExit, match=f"vocab_size = {len(bpe[1]) + 8}, but the weights .* have {len(bpe[1])} "
                                         "embedding rows"):
        main(["from-hf", str(hf_dir), str(tmp_path / "out")])


def test_untied_output_projection_is_refused(bpe, tmp_path):
    model = random_bart(len(bpe[1]))
    state = dict(model.state_dict(), **{"lm_head.weight": torch.randn(len(bpe[1]), D_MODEL)})
    hf_dir = write_hf_dir(tmp_path / "hf", model, bpe)
    torch.save(state, tmp_path / "untied.bin")
    with pytest.raises(SystemExit, match="lm_head.weight differs"):
        main(["from-hf", str(hf_dir), str(tmp_path / "out"), "--state-dict", str(tmp_path / "untied.bin")])


# ---- PageSum authors' state dicts (BART + lin) --------------------------------------------

def original_page_mixing(hf, lin, pages, prev):
    """The PageSum authors' decoding step, written with transformers' BART: decode every page,
    softmax over pages of lin(h_last), weighted sum of h_last, then lm_head + final_logits_bias."""
    src = dense_pages(pages)  # (P, L)
    out = hf(input_ids=src, attention_mask=src.ne(1), decoder_input_ids=prev.expand(len(pages), -1),
             output_hidden_states=True)
    hidden = out.decoder_hidden_states[-1]  # (P, T, d)
    weights = torch.softmax(lin(hidden), dim=0)  # (P, T, 1)
    mixed = (weights * hidden).sum(0)  # (T, d)
    return (hf.lm_head(mixed) + hf.final_logits_bias[0]).log_softmax(-1), weights.squeeze(-1)


@pytest.mark.parametrize("key_prefix", ["", "module."])
def test_pagesum_state_dict_log_probs_equal_original_page_mixing(bpe, tmp_path, key_prefix):
    vocab_size = len(bpe[1])
    hf = random_bart(vocab_size, seed=3)
    torch.manual_seed(4)
    lin = torch.nn.Linear(D_MODEL, 1)
    with torch.no_grad():
        lin.weight.mul_(20)  # confidences that really differ between pages
    hf_dir = write_hf_dir(tmp_path / "hf", hf, bpe)
    authors = {**hf.state_dict(), "lin.weight": lin.weight.detach(), "lin.bias": lin.bias.detach()}
    torch.save({key_prefix + k: v for k, v in authors.items()}, tmp_path / "pagesum.bin")
    main(["from-hf", str(hf_dir), str(tmp_path / "out"), "--state-dict", str(tmp_path / "pagesum.bin")])
    model, _ = load_converted(tmp_path / "out")

    rng = torch.Generator().manual_seed(5)
    examples = [page_tensors(rng, 4, vocab_size), page_tensors(rng, 2, vocab_size)]
    prev = torch.cat([torch.tensor([[2, 0]] * 2), torch.randint(4, vocab_size, (2, 6), generator=rng)], dim=1)
    src = torch.full((2, 4, max(len(p) for ex in examples for p in ex)), 1, dtype=torch.long)  # (batch, pages, len)
    for i, pages in enumerate(examples):
        for j, page in enumerate(pages):
            src[i, j, : len(page)] = page
    with torch.no_grad():
        logits, extra = model(src, None, prev)
        for i, pages in enumerate(examples):
            expected, weights = original_page_mixing(hf, lin, pages, prev[i: i + 1])
            torch.testing.assert_close(logits[i].log_softmax(-1), expected, atol=1e-5, rtol=0)
            torch.testing.assert_close(extra["page_weights"][i, : len(pages)], weights, atol=1e-5, rtol=0)
            assert weights.max() > 0.6  # the test would notice a uniform mixing


# ---- the other direction ------------------------------------------------------------------

def test_plugin_to_hf_to_plugin_round_trip_keeps_every_weight(copy_task_dir, tmp_path):
    args, _, model = build_tiny(copy_task_dir)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    torch.save(checkpoint_state(args, model), tmp_path / "model.pt")

    main(["to-hf", str(tmp_path / "model.pt"), str(tmp_path / "hf"), "--data", copy_task_dir])
    authors = torch.load(tmp_path / "hf" / AUTHORS_STATE_DICT_NAME, weights_only=True)
    assert torch.equal(authors["lin.weight"], model.decoder.page_confidence.weight)
    hf = PageSumForConditionalGeneration.from_pretrained(str(tmp_path / "hf"))
    assert torch.equal(hf.lm_head.weight, model.decoder.output_projection.weight)
    assert torch.equal(hf.model.page_confidence.weight, model.decoder.page_confidence.weight)
    assert not hf.config.scale_embedding and hf.config.activation_function == "gelu"

    main(["from-hf", str(tmp_path / "hf"), str(tmp_path / "back"),
          "--state-dict", str(tmp_path / "hf" / AUTHORS_STATE_DICT_NAME)])
    back = load_checkpoint_file(str(tmp_path / "back" / "model.pt"))["model"]
    original = model.state_dict()
    assert set(back) == set(original)
    for key, value in original.items():
        assert torch.equal(back[key], value), key


def test_transformers_generate_on_a_to_hf_model_gives_this_plugins_greedy_summaries(copy_task_dir, tmp_path):
    args, task, model = build_tiny(copy_task_dir)
    model = make_source_sensitive(model, task.dictionary)  # summaries of different lengths
    torch.save(checkpoint_state(args, model), tmp_path / "model.pt")
    main(["to-hf", str(tmp_path / "model.pt"), str(tmp_path / "hf")])
    hf = PageSumForConditionalGeneration.from_pretrained(str(tmp_path / "hf")).eval()

    rng = torch.Generator().manual_seed(3)
    documents = [random_pages(rng, 1, task.dictionary.nspecial, len(task.dictionary) - 8) for _ in range(4)]
    src = paged_batch(documents, task.dictionary)  # (4, 1, page_len): one page, i.e. BART
    sample = {"id": torch.arange(4), "net_input": {"src_tokens": src, "src_lengths": src.ne(1).sum((1, 2))}}
    ours = PageSumSequenceGenerator([model], task.dictionary, beam_size=1, max_len_b=12).generate([model], sample)
    lengths = set()
    for i, hypos in enumerate(ours):
        page = src[i, 0][src[i, 0].ne(task.dictionary.pad())]
        # transformers counts the decoder start </s>, the forced <s> and the closing </s> in max_length
        theirs = hf.generate(page[None, None], num_beams=1, no_repeat_ngram_size=0, do_sample=False,
                             max_length=12 + 3)[0]
        assert theirs[0] == task.dictionary.eos() and theirs[1] == task.dictionary.bos()
        assert torch.equal(theirs[1:], hypos[0]["tokens"])
        lengths.add(len(theirs))
    assert len(lengths) > 1, "the summaries end at different steps"


def test_to_hf_without_data_says_that_no_tokenizer_files_were_written(copy_task_dir, tmp_path, caplog):
    args, _, model = build_tiny(copy_task_dir)
    torch.save(checkpoint_state(args, model), tmp_path / "model.pt")
    main(["to-hf", str(tmp_path / "model.pt"), str(tmp_path / "hf")])
    assert "no tokenizer files written (pass --data" in caplog.text
    assert not (tmp_path / "hf" / "vocab.json").exists()


def test_to_hf_restores_the_tokenizer_vocabulary(converted_bart, tmp_path):
    _, hf_dir, out = converted_bart
    main(["to-hf", str(out / "model.pt"), str(tmp_path), "--data", str(out)])
    assert json.loads((tmp_path / "vocab.json").read_text()) == json.loads((hf_dir / "vocab.json").read_text())
    assert (tmp_path / "merges.txt").read_bytes() == (hf_dir / "merges.txt").read_bytes()


# ---- fairseq-generate -----------------------------------------------------------------------

@pytest.mark.slow
def test_fairseq_generate_decodes_every_example_with_a_converted_checkpoint(converted_bart, tmp_path):
    _, _, out = converted_bart
    data = tmp_path / "data"
    data.mkdir()
    for name in ("dict.txt", "encoder.json", "vocab.bpe"):
        shutil.copyfile(out / name, data / name)
    dictionary = Dictionary.load(str(data / "dict.txt"))
    rng = torch.Generator().manual_seed(7)
    examples = [{"pages": random_pages(rng, n, 4, 300), "summary": [5, 6, 7]} for n in (1, 3, 2)]
    write_split(str(data), "test", examples, dictionary)
    CorpusMeta(tokenizer="gpt2", view="document", dictionary_size=len(dictionary), splits=["test"]).save(data)
    log = run_cli(["fairseq-generate", str(data), "--user-dir", USER_DIR,
                   "--task", "paged_summarization", "--path", str(out / "model.pt"), "--gen-subset", "test",
                   "--beam", "2", "--max-len-b", "8", "--cpu", "--batch-size", "2"])
    hypotheses = [line for line in log.splitlines() if line.startswith("H-")]
    assert sorted(int(h.split("\t")[0][2:]) for h in hypotheses) == [0, 1, 2]
