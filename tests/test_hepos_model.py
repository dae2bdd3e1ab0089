"""The hepos model: BART when nothing is sparse, and consistent whatever is."""

import copy

import pytest
import torch

from builders.hepos import ENCODER_VARIANTS, SMALL_PATTERNS, build_hepos, flat_batch, random_texts, sample_of
from builders.models import (
    assert_batched_equals_alone,
    assert_incremental_equals_full,
    at_summary_positions,
    bart_twin,
    decoder_input,
    log_probs,
    make_source_sensitive,
)
from builders.stock import assert_same_hypotheses, over_search_settings, stock_generate
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.systems.hepos.efficient_attention import LSHAttention, SinkhornAttention, SlidingWindowAttention

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one CPU thread


@pytest.fixture(scope="module")
def stride_one(copy_task_dir):
    """HEPOS with s_h = 1 and full encoder attention: BART, computed the HEPOS way."""
    return build_hepos(copy_task_dir, "--hepos-stride", "1")


def test_stride_one_equals_fairseq_bart_log_probs_up_to_1024_tokens(stride_one):
    args, task, model = stride_one
    bart = bart_twin(args, task, model)
    d = task.dictionary
    src = flat_batch(random_texts(torch.Generator().manual_seed(1), [1022, 400, 37], d), d)  # (3, 1, 1024)
    _, prev = decoder_input([[5, 6, 7, 8], [9, 10], [11, 12, 13]], d)
    bart_src = src[:, 0]
    reference = at_summary_positions(log_probs(bart, bart_src, prev)[0], prev, d.pad())
    for source in (src, bart_src):  # pages, and a plain 2-D input
        ours = at_summary_positions(log_probs(model, source, prev)[0], prev, d.pad())
        torch.testing.assert_close(ours, reference, atol=1e-5, rtol=0)


@over_search_settings
def test_stride_one_beam_search_equals_fairseq_stock_generator_on_bart(copy_task_dir, settings):
    args, task, model = build_hepos(copy_task_dir, "--hepos-stride", "1")
    bart = bart_twin(args, task, model)
    d = task.dictionary
    sample = sample_of(flat_batch(random_texts(torch.Generator().manual_seed(2), [30, 700, 12], d), d), d.pad())
    ours = PageSumSequenceGenerator([model], d, **settings).generate([model], sample)

    assert_same_hypotheses(ours, stock_generate(bart, d, sample["net_input"]["src_tokens"][:, 0], settings))
    assert all(h["page_weights"] is None for hypos in ours for h in hypos)


VARIANTS = [("--encoder-attention", e) for e in ENCODER_VARIANTS] + [
    ("--cross-attention", "full"), ("--cross-attention", "linformer"), ("--cross-attention", "hepos")]


def variant_model(data_dir, flag, value):
    return build_hepos(data_dir, flag, value, *SMALL_PATTERNS, "--hepos-stride", "3")


@pytest.mark.parametrize("flag,value", VARIANTS, ids=lambda x: x)
def test_incremental_decoding_equals_the_full_forward_pass(copy_task_dir, flag, value):
    _, task, model = variant_model(copy_task_dir, flag, value)
    d = task.dictionary
    src = flat_batch(random_texts(torch.Generator().manual_seed(3), [41, 17, 30], d), d)
    _, prev = decoder_input([[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]], d)
    assert_incremental_equals_full(model, src, prev, d.pad())


@pytest.mark.parametrize("flag,value", VARIANTS, ids=lambda x: x)
def test_batched_equals_one_at_a_time(copy_task_dir, flag, value):
    _, task, model = variant_model(copy_task_dir, flag, value)
    d = task.dictionary
    texts = random_texts(torch.Generator().manual_seed(4), [41, 17, 30], d)
    summaries = [[5, 6, 7, 8, 9], [11, 12], [13, 14, 15]]
    assert_batched_equals_alone(model, texts, summaries, d, make_batch=lambda rows: flat_batch(rows, d))


def test_beams_sharing_one_encoder_output_decode_as_beams_with_their_own(copy_task_dir):
    _, task, model = build_hepos(copy_task_dir, *SMALL_PATTERNS, "--encoder-attention", "sinkhorn")
    d = task.dictionary
    make_source_sensitive(model, d)
    unshared = copy.deepcopy(model)
    unshared.set_beam_size = lambda beam: None  # the encoder output is repeated per beam
    sample = sample_of(flat_batch(random_texts(torch.Generator().manual_seed(5), [40, 9, 25, 33], d), d), d.pad())
    settings = dict(beam_size=4, max_len_b=20, len_penalty=1.5)
    shared_hypos = PageSumSequenceGenerator([model], d, **settings).generate([model], sample)
    own_hypos = PageSumSequenceGenerator([unshared], d, **settings).generate([unshared], sample)
    lengths = {len(hypos[0]["tokens"]) for hypos in shared_hypos}
    assert len(lengths) > 1, "examples must finish at different steps, so that finished ones are dropped"
    for a, b in zip(shared_hypos, own_hypos):
        for h, r in zip(a, b):
            assert torch.equal(h["tokens"], r["tokens"])
            torch.testing.assert_close(h["positional_scores"], r["positional_scores"], atol=1e-5, rtol=0)


def test_encoder_reads_one_flat_sequence(stride_one):
    _, task, model = stride_one
    pages = torch.full((1, 2, 5), task.dictionary.bos())
    with pytest.raises(ValueError, match="--view flat"):
        model.encoder(pages)


def test_encoder_refuses_a_source_longer_than_its_positions(stride_one):
    _, task, model = stride_one
    with pytest.raises(ValueError, match="--max-source-positions 1024"):
        model.encoder(torch.full((1, 1, 1025), 5))


LEARNED = [("lsh", LSHAttention), ("sinkhorn", SinkhornAttention)]


@pytest.mark.parametrize("attention,cls", LEARNED, ids=[a for a, _ in LEARNED])
def test_the_default_layout_alternates_window_and_learned_layers_as_the_authors_model(copy_task_dir, attention, cls):
    """LongDocSum's longbartmodel.py: layer i is a sliding window when i is even, LSH or
    Sinkhorn when it is odd."""
    _, _, model = build_hepos(copy_task_dir, "--encoder-attention", attention, "--encoder-layers", "4", *SMALL_PATTERNS)
    assert [type(layer.self_attn) for layer in model.encoder.layers] == [SlidingWindowAttention, cls] * 2


@pytest.mark.parametrize("attention,cls", LEARNED, ids=[a for a, _ in LEARNED])
def test_the_uniform_layout_gives_every_layer_the_learned_attention(copy_task_dir, attention, cls):
    _, _, model = build_hepos(copy_task_dir, "--encoder-attention", attention, "--encoder-layout", "uniform",
                              "--encoder-layers", "4", *SMALL_PATTERNS)
    assert [type(layer.self_attn) for layer in model.encoder.layers] == [cls] * 4


@pytest.mark.parametrize("attention", ["lsh", "sinkhorn"])
def test_a_hybrid_encoder_is_the_window_encoder_in_even_layers_and_the_learned_one_in_odd(copy_task_dir, attention):
    """Same weights three ways: the hybrid encoder computes what an encoder whose even layers
    come from the all-window model and odd layers from the all-LSH/Sinkhorn model computes."""
    flags = ("--encoder-layers", "4", *SMALL_PATTERNS)
    _, task, hybrid = build_hepos(copy_task_dir, "--encoder-attention", attention, *flags)
    _, _, window = build_hepos(copy_task_dir, "--encoder-attention", "window", *flags)
    _, _, learned = build_hepos(copy_task_dir, "--encoder-attention", attention, "--encoder-layout", "uniform", *flags)
    composite = copy.deepcopy(window)
    for i in (1, 3):
        composite.encoder.layers[i] = learned.encoder.layers[i]
    d = task.dictionary
    src = flat_batch(random_texts(torch.Generator().manual_seed(6), [45, 30], d), d)
    ours = hybrid.encoder(src)["encoder_out"][0]
    torch.testing.assert_close(ours, composite.encoder(src)["encoder_out"][0], atol=1e-6, rtol=0)
    assert not torch.allclose(ours, window.encoder(src)["encoder_out"][0], atol=1e-3)
    assert not torch.allclose(ours, learned.encoder(src)["encoder_out"][0], atol=1e-3)
