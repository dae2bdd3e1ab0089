"""The AWESOME model and its segment-by-segment decoding: equal to fairseq's BART where
they must agree, memories built from what was generated, batching that changes nothing."""

import argparse

import numpy as np
import pytest
import torch
from fairseq import options
from fairseq.criterions import build_criterion

from builders.awesome import awesome_bart_twin, build_awesome, randomize_memories, segment_sample
from builders.models import at_summary_positions, decoder_input, make_source_sensitive
from builders.stock import assert_same_hypotheses, over_search_settings, stock_generate
from pagesum_plugin.systems.awesome.generator import SegmentSequenceGenerator
from pagesum_plugin.systems.awesome.model import memory_layer_ids
from pagesum_plugin.systems.awesome.memory import (
    AttentiveMemory,
    CompressiveMemory,
    MemoryDecoderLayer,
    MemoryEncoderLayer,
    SegmentMemory,
)


def vocab(task):
    return task.dictionary.nspecial, len(task.dictionary) - 8


def random_documents(task, segment_counts, seed=0, min_len=4, max_len=10):
    rng = np.random.RandomState(seed)
    low, high = vocab(task)
    documents = [[rng.randint(low, high, size=rng.randint(min_len, max_len + 1)).tolist() for _ in range(n)]
                 for n in segment_counts]
    summaries = [[rng.randint(low, high, size=rng.randint(0, 5)).tolist() for _ in range(n)] for n in segment_counts]
    return documents, summaries


@pytest.fixture(scope="module")
def plain(copy_task_dir):
    """An AWESOME model without memories: Se3, i.e. BART segment by segment."""
    return build_awesome(copy_task_dir, "--memory", "none")


@pytest.fixture(scope="module", params=["attentive", "compressive"])
def with_memory(request, copy_task_dir):
    args, task, model = build_awesome(copy_task_dir, "--memory", request.param)
    return args, task, make_source_sensitive(randomize_memories(model), task.dictionary)


# --------------------------------------------------------------------------- BART


def test_without_memory_one_segment_equals_fairseq_bart(plain):
    args, task, model = plain
    bart = awesome_bart_twin(args, task, model)
    documents, summaries = random_documents(task, [1, 1, 1], seed=1)
    sample = segment_sample(documents, [s[:1] for s in summaries], task.dictionary)
    src = sample["net_input"]["src_tokens"][:, 0]  # (batch, seg_len)
    target, prev = decoder_input([s[0] for s in summaries], task.dictionary)
    pad = task.dictionary.pad()
    ours = at_summary_positions(model(src, None, prev)[0], prev, pad)
    theirs = at_summary_positions(bart(src, src.ne(pad).sum(1), prev)[0], prev, pad)
    # the decoder attends through SDPA, fairseq's BART through bmm + softmax: equal to rounding
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    assert len(model.state_dict()) == len(bart.state_dict())  # nothing added to BART


def test_a_fresh_memory_starts_from_bart(copy_task_dir, plain):
    """The memory read's output projection starts at zero: a one-segment document reads
    the initial memory and the model still computes what BART computes (up to the read's
    layer norm applied to states already normalized, a difference of the order of its eps)."""
    args, task, model = build_awesome(copy_task_dir, "--memory", "attentive")
    bart = awesome_bart_twin(*plain[:2], plain[2])
    bart.load_state_dict({k: v for k, v in model.state_dict().items() if ".memory." not in k})
    documents, summaries = random_documents(task, [1, 1], seed=2)
    src = segment_sample(documents, summaries, task.dictionary)["net_input"]["src_tokens"][:, 0]
    _, prev = decoder_input([s[0] for s in summaries], task.dictionary)
    pad = task.dictionary.pad()
    torch.testing.assert_close(at_summary_positions(model(src, None, prev)[0], prev, pad),
                               at_summary_positions(bart(src, None, prev)[0], prev, pad), atol=2e-3, rtol=1e-3)


@over_search_settings
def test_one_segment_decodes_as_fairseq_stock_generator_on_bart(plain, settings):
    args, task, model = plain
    bart = awesome_bart_twin(args, task, model)
    documents, summaries = random_documents(task, [1, 1, 1], seed=11)
    sample = segment_sample(documents, summaries, task.dictionary)
    ours = SegmentSequenceGenerator([model], task.dictionary, **settings).generate([model], sample)

    assert_same_hypotheses(ours, stock_generate(bart, task.dictionary, sample["net_input"]["src_tokens"][:, 0], settings))


# --------------------------------------------------------------------------- decoding


def generate(model, task, documents, summaries, **settings):
    sample = segment_sample(documents, summaries, task.dictionary)
    generator = SegmentSequenceGenerator([model], task.dictionary, **{"beam_size": 3, "max_len_b": 6, **settings})
    return generator.generate([model], sample)


def test_the_summary_is_the_concatenation_of_the_segments_summaries(with_memory):
    args, task, model = with_memory
    documents, summaries = random_documents(task, [3], seed=4)
    best = generate(model, task, documents, summaries)[0][0]
    bos, eos = task.dictionary.bos(), task.dictionary.eos()
    parts = [t[1:-1] for t in best["segments"]]
    assert len(parts) == 3
    assert best["tokens"].tolist() == [bos, *torch.cat(parts).tolist(), eos]
    assert len(best["positional_scores"]) == len(best["tokens"])


def test_decoding_builds_the_memory_from_generated_not_reference_summaries(with_memory):
    args, task, model = with_memory
    documents, summaries = random_documents(task, [2], seed=5)
    _, other_summaries = random_documents(task, [2], seed=6)
    best = generate(model, task, documents, summaries)[0][0]
    assert torch.equal(best["tokens"], generate(model, task, documents, other_summaries)[0][0]["tokens"])

    # Rebuild segment 2's decoding by hand from the summary generated for segment 1.
    generator = SegmentSequenceGenerator([model], task.dictionary, beam_size=3, max_len_b=6)
    src = segment_sample(documents, summaries, task.dictionary)["net_input"]["src_tokens"]
    first, second = (src[:, j, : int(src[0, j].ne(task.dictionary.pad()).sum())] for j in (0, 1))
    memory = SegmentMemory()
    with torch.no_grad():
        generated = best["segments"][0]
        model(first, None, torch.cat([generated.new_tensor([task.dictionary.eos()]), generated[:-1]])[None],
              memory=memory)
        by_hand = generator._search_segment(model, second, memory)[0][0]
    assert torch.equal(by_hand["tokens"], best["segments"][1])

    # The reference would have written another decoder memory.
    reference = torch.tensor([task.dictionary.bos(), *summaries[0][0], task.dictionary.eos()])
    from_reference = SegmentMemory()
    with torch.no_grad():
        model(first, None, torch.cat([reference.new_tensor([task.dictionary.eos()]), reference[:-1]])[None],
              memory=from_reference)
    if model.decoder.memories and not torch.equal(reference, generated):
        ours, theirs = model.read_memory(memory, 1)[1], model.read_memory(from_reference, 1)[1]
        assert any(not torch.allclose(a.values, b.values) for a, b in zip(ours, theirs))


def test_batched_decoding_equals_one_document_at_a_time(with_memory):
    args, task, model = with_memory
    documents, summaries = random_documents(task, [1, 3, 2, 4], seed=7)
    batched = generate(model, task, documents, summaries, beam_size=2, max_len_b=8)
    for i, (document, summary) in enumerate(zip(documents, summaries)):
        alone = generate(model, task, [document], [summary], beam_size=2, max_len_b=8)[0]
        assert torch.equal(batched[i][0]["tokens"], alone[0]["tokens"]), i
        torch.testing.assert_close(batched[i][0]["score"], alone[0]["score"], atol=1e-5, rtol=0)


def test_batched_training_loss_equals_the_sum_over_documents(with_memory):
    args, task, model = with_memory
    criterion = build_criterion(args, task)
    documents, summaries = random_documents(task, [2, 4, 1], seed=8)

    def loss_of(docs, sums):
        sample = segment_sample(docs, sums, task.dictionary)
        with torch.no_grad():
            loss, size, log = task.valid_step(sample, model, criterion)
        return loss, size, log

    loss, size, log = loss_of(documents, summaries)
    parts = [loss_of([d], [s]) for d, s in zip(documents, summaries)]
    torch.testing.assert_close(loss, sum(p[0] for p in parts), atol=1e-4, rtol=1e-5)
    assert size == sum(p[1] for p in parts)
    assert (log["ndocuments"], log["nsegments"]) == (3, 7)


def test_incremental_decoding_with_memories_equals_full_recomputation(with_memory):
    """The decoder memory is read at every step: through the self-attention cache (compressive)
    or a static cross-attention (attentive)."""
    args, task, model = with_memory
    documents, summaries = random_documents(task, [2, 2], seed=9)
    sample = segment_sample(documents, summaries, task.dictionary)
    pad = task.dictionary.pad()
    memory = SegmentMemory()
    steps = task.segment_steps(sample, memory)
    with torch.no_grad():
        model(**next(steps)["net_input"])  # segment 1 writes the memories
        second = next(steps)["net_input"]
        encoder_memory, decoder_memory = model.read_memory(memory, 2)  # what segment 2 reads
        full, _ = model(second["src_tokens"], None, second["prev_output_tokens"], memory=memory)
        encoder_out = model.encoder(second["src_tokens"], encoder_memory=encoder_memory, decoder_memory=decoder_memory)
        prev, state = second["prev_output_tokens"], {}
        for t in range(prev.size(1)):
            step, _ = model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
            rows = prev[:, t].ne(pad)
            torch.testing.assert_close(step[rows, 0], full[rows, t], atol=1e-4, rtol=0)


def test_generation_runs_through_the_task_generator(with_memory):
    args, task, model = with_memory
    generator = task.build_generator([model], argparse.Namespace(beam=2, max_len_b=5, min_len=1, lenpen=1.0))
    assert isinstance(generator, SegmentSequenceGenerator)
    documents, summaries = random_documents(task, [2, 1], seed=10)
    hypos = task.inference_step(generator, [model], segment_sample(documents, summaries, task.dictionary))
    assert [len(h) >= 1 for h in hypos] == [True, True]


# --------------------------------------------------------------------------- checkpoints


def test_a_plain_bart_checkpoint_loads_with_fresh_memories(copy_task_dir, plain):
    args, task, model = build_awesome(copy_task_dir, "--memory", "attentive")
    bart_state = awesome_bart_twin(*plain).state_dict()
    model.load_state_dict(dict(bart_state), strict=True)  # fairseq's loading path: upgrade, then strict
    for key, value in bart_state.items():
        assert torch.equal(model.state_dict()[key], value)


def test_decoding_defaults_are_per_segment_and_let_a_segment_summary_be_empty(plain):
    _, task, _ = plain
    assert (task.generation_defaults.min_len, task.generation_defaults.max_len_b) == (0, 256)


# --------------------------------------------------------------------------- architectures


# BART-large's depth and AWESOME's memory settings, at a width small enough to build on a CPU
NARROW = ["--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
          "--decoder-attention-heads", "2"]


def memory_layers(stack) -> list:
    return [i for i, layer in enumerate(stack.layers) if isinstance(layer, (MemoryEncoderLayer, MemoryDecoderLayer))]


def test_awesome_bart_large_is_bart_large_with_the_papers_memory_settings(copy_task_dir):
    """Sec. 3.1 and Appendix D: m = 1024 memory slots for BART-large, compression rate r = 5,
    and memories in the last 3 layers (attentive) of BART-large's 12 + 12."""
    args = options.parse_args_and_arch(options.get_training_parser(), [
        copy_task_dir, "--task", "segmented_summarization", "--arch", "awesome_bart_large"])  # not built: 400M weights
    assert (args.encoder_embed_dim, args.encoder_layers, args.decoder_layers) == (1024, 12, 12)
    assert (args.memory, args.memory_slots, args.compression_rate, args.memory_in) == ("attentive", 1024, 5, "both")
    for side, layers in (("encoder", args.encoder_layers), ("decoder", args.decoder_layers)):
        assert memory_layer_ids(args, side, layers) == (9, 10, 11)


def test_attentive_memory_sits_in_the_last_three_encoder_and_decoder_layers_with_1024_slots(copy_task_dir):
    args, _, model = build_awesome(copy_task_dir, *NARROW, arch="awesome_bart_large")
    assert memory_layers(model.encoder) == memory_layers(model.decoder) == [9, 10, 11]
    for memory in model.encoder.memories + model.decoder.memories:
        assert isinstance(memory, AttentiveMemory)
        assert memory.slots == 1024 and tuple(memory.initial.shape) == (1024, 16)


def test_compressive_memory_sits_in_the_first_three_layers_and_compresses_half_its_slots_by_five(copy_task_dir):
    """Eq. 1-6: the first half of the m = 1024 slots holds history compressed by a
    convolution of ratio r = 5, the other half the most recent states."""
    args, _, model = build_awesome(copy_task_dir, *NARROW, "--memory", "compressive", arch="awesome_bart_large")
    assert memory_layers(model.encoder) == memory_layers(model.decoder) == [0, 1, 2]
    memories = model.encoder.memories + model.decoder.memories
    assert len(memories) == 6
    for memory in memories:
        assert isinstance(memory, CompressiveMemory)
        assert (memory.slots, memory.rate) == (1024, 5)
        assert (memory.compress.kernel_size, memory.compress.stride) == ((5,), (5,))
    memory = memories[0]
    # 512 recent states, and 5 x 512 pushed out before them: exactly enough to fill both halves
    states = torch.randn(1, 512 + 5 * 512, 16)
    with torch.no_grad():
        slots = memory.write(memory.initial_slots(1, states), states, torch.zeros(1, states.size(1), dtype=torch.bool))
        compressed = memory.compress(states[0, :5 * 512].t().unsqueeze(0)).squeeze(0).t()  # (512, 16)
    assert not slots.empty.any()
    torch.testing.assert_close(slots.values[0, :512], compressed)  # the compressed half
    torch.testing.assert_close(slots.values[0, 512:], states[0, -512:])  # the recent half
