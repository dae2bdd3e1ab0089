"""Every option of the rival systems reaches the modules it configures: each model is built
through fairseq's own command-line parser, as fairseq-train builds it, and its modules are
read back. (What each module then computes with the setting is tested on the module.)"""

import pytest

from builders.awesome import build_awesome
from builders.hed import build_hed
from builders.hepos import build_hepos
from pagesum_plugin.systems.hepos.model import DEFAULTS, default_lsh_buckets
from pagesum_plugin.systems.hepos.efficient_attention import LSHAttention, SinkhornAttention, SlidingWindowAttention
from pagesum_plugin.systems.hed.attention import DocumentSelfAttention, HierarchicalCrossAttention
from pagesum_plugin.systems.hepos.attention import CrossAttention, HeposAttention, LinformerCrossAttention
from pagesum_plugin.systems.awesome.memory import AttentiveMemory, CompressiveMemory, MemoryDecoderLayer, MemoryEncoderLayer

FOUR_LAYERS = ["--encoder-layers", "4", "--decoder-layers", "4"]


def encoder_attentions(model):
    return [layer.self_attn for layer in model.encoder.layers]


def cross_attentions(model):
    return [layer.encoder_attn for layer in model.decoder.layers]


def memory_layers(stack):
    return [i for i, layer in enumerate(stack.layers) if isinstance(layer, (MemoryEncoderLayer, MemoryDecoderLayer))]


# --------------------------------------------------------------------------- HEPOS


def test_hepos_stride_reaches_every_cross_attention(copy_task_dir):
    _, _, model = build_hepos(copy_task_dir, "--hepos-stride", "2", *FOUR_LAYERS)
    assert all(type(a) is HeposAttention and a.stride == 2 for a in cross_attentions(model))


def test_hepos_defaults_are_the_papers_stride_and_the_authors_sparse_settings(copy_task_dir):
    """Section 6.2: s_h = 4, w = 256, l = 4 rounds of b_l = 64, b_s = 128; the authors' release:
    the hybrid layout, and the sorting network's 7 iterations at temperature 0.7."""
    _, _, lsh = build_hepos(copy_task_dir, "--encoder-attention", "lsh", *FOUR_LAYERS)
    _, _, sinkhorn = build_hepos(copy_task_dir, "--encoder-attention", "sinkhorn", *FOUR_LAYERS)
    assert all(a.stride == 4 for a in cross_attentions(lsh))
    for model, cls in ((lsh, LSHAttention), (sinkhorn, SinkhornAttention)):
        window, learned = encoder_attentions(model)[0::2], encoder_attentions(model)[1::2]
        assert all(type(a) is SlidingWindowAttention and a.half_window == 128 for a in window)
        assert all(type(a) is cls for a in learned)
    assert all((a.rounds, a.bucket_size) == (4, 64) for a in encoder_attentions(lsh)[1::2])
    assert all((a.block_size, a.iterations, a.temperature) == (128, 7, 0.7) for a in encoder_attentions(sinkhorn)[1::2])
    assert DEFAULTS["encoder_layout"] == "hybrid"


def test_window_size_global_tokens_and_window_stride_reach_every_window_layer(copy_task_dir):
    _, _, model = build_hepos(copy_task_dir, "--encoder-attention", "window", "--window-size", "6",
                              "--global-tokens", "2", "--window-stride", "3", *FOUR_LAYERS)
    for attention in encoder_attentions(model):
        assert type(attention) is SlidingWindowAttention
        assert (attention.half_window, attention.global_tokens, attention.stride) == (3, 2, 3)


def test_lsh_rounds_bucket_size_buckets_and_seed_reach_every_lsh_layer(copy_task_dir):
    _, _, model = build_hepos(copy_task_dir, "--encoder-attention", "lsh", "--encoder-layout", "uniform",
                              "--lsh-rounds", "3", "--lsh-bucket-size", "5", "--lsh-buckets", "6", "--lsh-seed", "9",
                              *FOUR_LAYERS)
    for index, attention in enumerate(encoder_attentions(model)):
        assert type(attention) is LSHAttention
        assert (attention.rounds, attention.bucket_size, attention.n_buckets) == (3, 5, 6)
        assert attention.seed == 9 + index  # each layer hashes with rotations of its own


def test_lsh_buckets_default_to_the_largest_power_of_two_at_most_twice_the_chunks(copy_task_dir):
    _, _, model = build_hepos(copy_task_dir, "--encoder-attention", "lsh", "--lsh-bucket-size", "100",
                              "--max-source-positions", "1000")
    assert all(a.n_buckets == 16 for a in encoder_attentions(model)[1::2])  # 2 x 10 chunks: 16, as the authors'
    # the recipes' 7,168 positions in chunks of 64: 224 rounded down to 128; 4,096 and 8,192 are powers already
    assert [default_lsh_buckets(n, 64) for n in (7168, 4096, 8192, 40)] == [128, 128, 256, 2]


def test_the_hybrid_window_layers_take_the_window_options(copy_task_dir):
    _, _, model = build_hepos(copy_task_dir, "--encoder-attention", "sinkhorn", "--window-size", "10",
                              "--sinkhorn-block-size", "5", *FOUR_LAYERS)
    assert [a.half_window for a in encoder_attentions(model)[0::2]] == [5, 5]
    assert [a.block_size for a in encoder_attentions(model)[1::2]] == [5, 5]


def test_sinkhorn_block_size_iterations_and_temperature_reach_every_sinkhorn_layer(copy_task_dir):
    _, _, model = build_hepos(copy_task_dir, "--encoder-attention", "sinkhorn", "--encoder-layout", "uniform",
                              "--sinkhorn-block-size", "5", "--sinkhorn-iterations", "3",
                              "--sinkhorn-temperature", "0.5", *FOUR_LAYERS)
    for attention in encoder_attentions(model):
        assert type(attention) is SinkhornAttention
        assert (attention.block_size, attention.iterations, attention.temperature) == (5, 3, 0.5)


@pytest.mark.parametrize("flag,cls", [("full", CrossAttention), ("linformer", LinformerCrossAttention)])
def test_the_cross_attention_choice_reaches_every_decoder_layer(copy_task_dir, flag, cls):
    _, _, model = build_hepos(copy_task_dir, "--cross-attention", flag, "--linformer-k", "7", *FOUR_LAYERS)
    assert all(type(a) is cls for a in cross_attentions(model))
    if cls is LinformerCrossAttention:
        assert all(a.compress_k.out_features == a.compress_v.out_features == 7 for a in cross_attentions(model))


def test_max_source_positions_reaches_the_learned_positions(copy_task_dir):
    _, task, model = build_hepos(copy_task_dir, "--max-source-positions", "3000")
    assert model.encoder.max_positions() == 3000
    assert model.encoder.embed_positions.weight.size(0) == 3000 + task.dictionary.pad() + 1


# --------------------------------------------------------------------------- AWESOME


def test_memory_slots_reach_every_memory(copy_task_dir):
    for kind, cls in (("attentive", AttentiveMemory), ("compressive", CompressiveMemory)):
        _, _, model = build_awesome(copy_task_dir, "--memory", kind, "--memory-slots", "6")
        memories = model.encoder.memories + model.decoder.memories
        assert memories and all(type(m) is cls and m.slots == 6 for m in memories)
        if cls is AttentiveMemory:
            assert all(m.initial.size(0) == 6 for m in memories)


def test_memory_layers_choose_the_layers_that_hold_a_memory(copy_task_dir):
    _, _, model = build_awesome(copy_task_dir, "--memory-layers", "0,2", *FOUR_LAYERS)
    assert memory_layers(model.encoder) == memory_layers(model.decoder) == [0, 2]


@pytest.mark.parametrize("side", ["encoder", "decoder"])
def test_memory_in_one_side_leaves_the_other_without(copy_task_dir, side):
    _, _, model = build_awesome(copy_task_dir, "--memory-in", side)
    other = "decoder" if side == "encoder" else "encoder"
    assert getattr(model, side).memories and not getattr(model, other).memories


def test_compression_rate_reaches_every_compressive_memory(copy_task_dir):
    _, _, model = build_awesome(copy_task_dir, "--memory", "compressive", "--compression-rate", "3",
                                "--memory-slots", "6")
    for memory in model.encoder.memories + model.decoder.memories:
        assert memory.rate == 3 and (memory.compress.kernel_size, memory.compress.stride) == ((3,), (3,))


def test_memory_grad_segments_reaches_the_model(copy_task_dir):
    _, _, default = build_awesome(copy_task_dir)
    _, _, model = build_awesome(copy_task_dir, "--memory-grad-segments", "3")
    assert (default.memory_grad_segments, model.memory_grad_segments) == (1, 3)


def test_no_memory_builds_plain_bart_layers(copy_task_dir):
    _, _, model = build_awesome(copy_task_dir, "--memory", "none")
    assert not memory_layers(model.encoder) and not memory_layers(model.decoder)


# --------------------------------------------------------------------------- HED


def test_hed_builds_document_attention_in_every_layer(copy_task_dir):
    """The HED layout: document-restricted self-attention with start-of-document links in every
    encoder layer, hierarchical cross-attention in every decoder layer."""
    _, _, model = build_hed(copy_task_dir, *FOUR_LAYERS)
    assert all(type(a) is DocumentSelfAttention for a in encoder_attentions(model))
    assert all(type(a) is HierarchicalCrossAttention for a in cross_attentions(model))


def test_hed_source_positions_default_to_4096_and_follow_the_flag(copy_task_dir):
    _, task, default = build_hed(copy_task_dir)
    _, _, model = build_hed(copy_task_dir, "--max-source-positions", "2048")
    offset = task.dictionary.pad() + 1
    assert default.encoder.embed_positions.weight.size(0) == 4096 + offset
    assert model.encoder.embed_positions.weight.size(0) == 2048 + offset
