"""Beam search with fixed shapes (``generation/static_search.py``) finds the step loop's
hypotheses for every system that decodes through the page generator: the same tokens, and
scores, positional scores and page weights to 1e-5, with beams and examples ending at
different steps, finished examples kept in the batch until the batch is cut down to the
others, trigram blocking, the length settings,
--top-pages, and a batch against one document at a time. Its step compiles whole with
``torch.compile(fullgraph=True)``: one graph for every step, no graph break, which is what a
CUDA graph needs (``tests/test_cuda_equals_cpu.py`` captures it on a GPU). Between two steps
the host dispatches two operators: the read-back of the hypotheses that ended."""

import logging

import pytest
import torch
from fairseq import search

from benchmarks.step_operators import Dispatched
from builders.models import build_tiny, make_source_sensitive
from builders.stock import assert_same_hypotheses
from builders.systems import BEAM_SETTINGS, build_system, pages
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.modules import decoder_self_attention
from pagesum_plugin.modules.decoder_self_attention import DecoderSelfAttention
from pagesum_plugin.generation.ngram_blocking import ban_repeated_ngrams
from pagesum_plugin.generation import static_search
from pagesum_plugin.generation.static_search import FixedShapeSearch, ban_repeated_ngrams_at
from pagesum_recipes.profiling import CountedGraphs

pytestmark = pytest.mark.usefixtures("one_thread")

SYSTEMS = ["pagesum", "hepos", "bart", "hed", "awesome"]  # every system: AWESOME searches each segment so
COUNTS = (3, 1, 4, 2, 1)  # pages or documents of each example
CUT_DOWN_SEEDS = {"hepos": 5}  # a sample whose examples end far enough apart for the batch to be cut down


@pytest.fixture(scope="module", params=SYSTEMS)
def system(request, copy_task_dir):
    return build_system(request.param, copy_task_dir)


def generate(system, sample, decoding, **settings):
    with torch.no_grad():
        return system.generator(decoding=decoding, **settings).generate([system.model], sample)


def assert_same_search(found, expected, atol=1e-5):
    assert_same_hypotheses(found, expected, atol=atol, page_weights=True)


@pytest.mark.parametrize("settings", BEAM_SETTINGS.values(), ids=BEAM_SETTINGS.keys())
def test_fixed_shapes_find_the_step_loops_hypotheses(system, settings, caplog):
    sample = system.make_sample(COUNTS, seed=1)
    with caplog.at_level(logging.INFO):
        found = generate(system, sample, "static", **settings)
    assert not [r for r in caplog.records if "step by step" in r.getMessage()], "the fixed shapes ran"
    assert_same_search(found, generate(system, sample, "eager", **settings))


def test_fixed_shapes_apply_the_unknown_word_penalty_as_the_step_loop_does(system):
    sample = system.make_sample(COUNTS, seed=1)
    settings = dict(beam_size=3, max_len_b=8, unk_penalty=-20.0)  # a bonus: summaries of <unk>
    found = generate(system, sample, "static", **settings)
    assert_same_search(found, generate(system, sample, "eager", **settings))
    assert system.task.dictionary.unk() in found[0][0]["tokens"].tolist()


def test_examples_end_at_different_steps_and_stay_in_the_batch_until_the_end(system):
    """The examples that are done keep being decoded, masked: the others' hypotheses are those
    of the step loop, which drops them."""
    sample = system.make_sample(COUNTS, seed=2)
    hypos = generate(system, sample, "static", **BEAM_SETTINGS["beams-end-apart"])
    assert_same_search(hypos, generate(system, sample, "eager", **BEAM_SETTINGS["beams-end-apart"]))
    longest = [max(len(h["tokens"]) for h in n_best) for n_best in hypos]
    assert len(set(longest)) > 1, "examples ended at different steps"


def test_once_half_the_examples_are_done_the_batch_is_cut_down_to_the_others_and_finds_the_same(
        system, monkeypatch):
    """Every step decodes the whole batch until at most half its examples are left, then only
    theirs: each cut at least halves the batch, and the hypotheses, the done examples' among
    them, are the step loop's."""
    cuts, cut_down = [], FixedShapeSearch._cut_down

    def recording(self, state, *args, **kwargs):
        cut = cut_down(self, state, *args, **kwargs)
        cuts.append((state.done.size(0), cut[0].done.size(0)))  # examples before, after
        return cut

    monkeypatch.setattr(FixedShapeSearch, "_cut_down", recording)
    sample = system.make_sample(COUNTS, seed=CUT_DOWN_SEEDS.get(system.name, 2))
    found = generate(system, sample, "static", **BEAM_SETTINGS["lenpen-trigrams"])
    monkeypatch.undo()
    assert_same_search(found, generate(system, sample, "eager", **BEAM_SETTINGS["lenpen-trigrams"]))
    assert cuts, "examples ended apart, and the batch was cut down"
    assert all(0 < 2 * after <= before for before, after in cuts)


def test_a_kept_search_is_cut_down_on_copies_and_the_next_search_replays_its_steps_on_the_originals(
        system, monkeypatch):
    """Captured steps are kept for later searches of the same shapes, with the state they read; a
    search cuts its batch down on copies of what they read, so that the next search, which
    replays the kept steps on its own state copied in, finds its own hypotheses. (On the CPU the
    "capture" runs the step as it is, on the tensors a graph would have recorded.)"""
    monkeypatch.setattr(static_search, "CapturedStep", lambda step, pool=None: step)
    generator = system.generator(**BEAM_SETTINGS["lenpen-trigrams"])
    monkeypatch.setattr(generator, "_fixed_shapes", lambda *args: "graph")
    sample = system.make_sample(COUNTS, seed=CUT_DOWN_SEEDS.get(system.name, 2))
    expected = generate(system, sample, "eager", **BEAM_SETTINGS["lenpen-trigrams"])
    cuts, cut_down = [], FixedShapeSearch._cut_down
    monkeypatch.setattr(FixedShapeSearch, "_cut_down",
                        lambda *args, **kwargs: cuts.append(1) or cut_down(*args, **kwargs))
    for _ in range(3):
        with torch.no_grad():
            assert_same_search(generator.generate([system.model], sample), expected)
    assert len(cuts) >= 3, "every search was cut down"


def test_a_step_reads_the_caches_a_bucket_of_positions_at_a_time_and_finds_what_reading_all_finds(
        system, monkeypatch):
    """With buckets of 4 positions: the steps at positions 1 to 3 read 4 positions of the caches,
    those at 4 to 7 read 8, and so on, never fewer than they have written, and the search is the
    step loop's (the positions left out are masked whatever their number)."""
    monkeypatch.setattr(static_search, "READ_BUCKET", 4)
    reads, step_at, attend = [], DecoderSelfAttention._step_at, decoder_self_attention.attend_through_table

    def recording(self, position, *args):
        reads.append([int(position)])
        return step_at(self, position, *args)

    def read(q, keys, *args, **kwargs):  # keys: (blocks, heads, positions read, beams, head_dim)
        reads[-1].append(keys.size(2))
        return attend(q, keys, *args, **kwargs)

    monkeypatch.setattr(DecoderSelfAttention, "_step_at", recording)
    monkeypatch.setattr(decoder_self_attention, "attend_through_table", read)
    sample = system.make_sample(COUNTS, seed=2)
    found = generate(system, sample, "static", **BEAM_SETTINGS["beams-end-apart"])
    monkeypatch.undo()
    assert_same_search(found, generate(system, sample, "eager", **BEAM_SETTINGS["beams-end-apart"]))
    bucketed = [(position, read) for position, read in reads if position > 0]  # the first step reads the whole cache
    assert bucketed and all(position < read <= 4 * (position // 4 + 1) for position, read in bucketed)
    assert len({read for _, read in bucketed}) > 1, "the steps read more and more of the caches"


def test_a_batch_finds_what_each_document_finds_alone(system):
    batch = system.make_sample(COUNTS, seed=1)
    found = generate(system, batch, "static", **BEAM_SETTINGS["lenpen-trigrams"])
    for i, count in enumerate(COUNTS):
        alone = generate(system, system.make_sample((count,), seed=1) if i == 0 else one_of(system, batch, i),
                         "static", **BEAM_SETTINGS["lenpen-trigrams"])
        assert_same_search([found[i]], alone, atol=1e-4)


def one_of(system, batch, i):
    """Example ``i`` of ``batch`` alone, its padding cut."""
    src = batch["net_input"]["src_tokens"][i : i + 1]
    pad = system.task.dictionary.pad()
    real = src.ne(pad)
    src = src[:, : int(real.any(2).sum()), : int(real.any(1).sum())]
    return {"id": torch.tensor([i]), "net_input": {"src_tokens": src, "src_lengths": src.ne(pad).sum((1, 2))}}


def test_top_pages_with_fixed_shapes_equals_the_step_loop(copy_task_dir):
    _, task, model = build_tiny(copy_task_dir)
    model = make_source_sensitive(model, task.dictionary)
    src = pages(task, (4, 2, 3), seed=3)
    sample = {"id": torch.arange(3), "net_input": {"src_tokens": src, "src_lengths": src.ne(task.dictionary.pad())
                                                                                        .sum((1, 2))}}

    def search(decoding):
        generator = PageSumSequenceGenerator([model], task.dictionary, beam_size=3, max_len_b=20, top_pages=2,
                                             decoding=decoding)
        with torch.no_grad():
            return generator.generate([model], sample)

    assert_same_search(search("static"), search("eager"))


def test_pages_copied_per_beam_decode_with_fixed_shapes_as_the_step_loop_does(copy_task_dir, caplog):
    """The layout before beam sharing: each beam's rows of the encoder output are its example's,
    so a reorder among an example's beams leaves them as they are, and the fixed shapes never
    reorder them."""
    system = build_system("pagesum", copy_task_dir)
    sample = system.make_sample(COUNTS, seed=3)

    def search(decoding):
        generator = system.generator(decoding=decoding, **BEAM_SETTINGS["beams-end-apart"])
        system.model.set_beam_size(4, share_pages=False)  # after the generator, which sets sharing
        try:
            with torch.no_grad():
                return generator.generate([system.model], sample)
        finally:
            system.model.set_beam_size(4)

    with caplog.at_level(logging.INFO):
        found = search("static")
    assert not [r for r in caplog.records if "step by step" in r.getMessage()], "the fixed shapes ran"
    assert_same_search(found, search("eager"))


def test_the_step_compiles_whole_into_one_graph_that_serves_every_step(system):
    """torch.compile(fullgraph=True) raises at a graph break; one graph, called at every step
    after the first, means no step recompiled: the shapes and the guards held."""
    sample = system.make_sample(COUNTS, seed=1)
    counted = CountedGraphs("eager")
    torch._dynamo.reset()
    compiled = generate(system, sample, lambda step: torch.compile(step, fullgraph=True, backend=counted),
                        **BEAM_SETTINGS["lenpen-trigrams"])
    assert_same_search(compiled, generate(system, sample, "eager", **BEAM_SETTINGS["lenpen-trigrams"]))
    if system.name == "awesome":  # a search per segment, each with shapes of its own
        assert len(counted.calls) <= 2 * max(COUNTS), "graphs follow the segments' shapes, never the steps"
        return
    steps = max(len(h["tokens"]) for n_best in compiled for h in n_best) + 1  # the forced <s> is stripped
    assert len(counted.calls) == 1 and counted.calls[0] >= steps - 2


def storages(state, states):
    """Where every tensor of the search's state and the decoder's cached state lives."""
    found = {field: getattr(state, field).data_ptr() for field in ("ended", "done", "position", "lengths")}
    found.update({f"beams.{field}": getattr(state.beams, field).data_ptr()
                  for field in ("tokens", "scores", "ignored") if getattr(state.beams, field) is not None})
    found.update({f"candidates.{field}": getattr(state.candidates, field).data_ptr()
                  for field in ("scores", "tokens", "beams")})
    for key, entries in states[0].items():
        if isinstance(entries, dict):
            found.update({f"{key}.{name}": t.data_ptr() for name, t in entries.items() if torch.is_tensor(t)})
    return found


@pytest.mark.slow  # inductor compiles the step (about 30 s on 2 cores)
def test_the_step_fused_by_inductor_finds_the_step_loops_hypotheses_and_serves_the_next_search(copy_task_dir):
    system = build_system("pagesum", copy_task_dir)
    sample = system.make_sample(COUNTS, seed=2)
    expected = generate(system, sample, "eager", **BEAM_SETTINGS["lenpen-trigrams"])
    torch._dynamo.reset()
    counted = CountedGraphs("inductor")
    for _ in range(2):  # the second search reuses the first one's compiled step
        found = generate(system, sample, lambda step: torch.compile(step, fullgraph=True, backend=counted),
                         **BEAM_SETTINGS["lenpen-trigrams"])
        assert_same_search(found, expected, atol=1e-4)
    assert_same_search(generate(system, sample, "fused", **BEAM_SETTINGS["lenpen-trigrams"]), expected, atol=1e-4)
    assert len(counted.calls) == 1  # (a search of another length sizes its buffers anew, and compiles again)


def test_every_step_writes_its_state_in_place_where_a_captured_graph_reads_it(system, monkeypatch):
    """A CUDA graph replays the kernels on the addresses it captured: every step must find the
    search's state and the decoder's caches and beam tables at the same addresses."""
    seen = {}  # search (AWESOME makes one per segment) -> the storages after each of its steps
    step = FixedShapeSearch._step

    def recording(self, state, encoder_outs, states, suppressed):
        step(self, state, encoder_outs, states, suppressed)
        seen.setdefault(id(state), [state]).append(storages(state, states))  # (the state kept: ids stay unique)

    monkeypatch.setattr(FixedShapeSearch, "_step", recording)
    generate(system, system.make_sample(COUNTS, seed=2), "static", **BEAM_SETTINGS["beams-end-apart"])
    first = next(iter(seen.values()))[1:]
    assert len(first) > 3 and len(first[0]) > 10
    for _, *snapshots in seen.values():
        for snapshot in snapshots[1:]:
            assert snapshot == snapshots[0]


def test_before_the_minimum_length_the_host_dispatches_nothing_between_two_steps(copy_task_dir):
    """</s> is banned before the minimum length, so no hypothesis can end there: the host reads
    nothing back and launches the next step at once (8 steps more, all before the minimum
    length, and not one operator more outside the steps)."""
    system = build_system("pagesum", copy_task_dir)
    sample = system.make_sample((2, 3), seed=4)

    def operators(steps):
        counter = Dispatched()
        with counter:
            generate(system, sample, counter.runner, beam_size=4, min_len=steps, max_len_b=steps)
        return counter

    short, long = operators(6), operators(14)
    assert long.outside == short.outside
    assert (long.inside - short.inside) / 8 > 100  # the whole step ran inside


def test_the_ended_hypotheses_are_read_back_at_every_step_from_the_minimum_length_on(copy_task_dir, monkeypatch):
    system = build_system("pagesum", copy_task_dir)
    sample = system.make_sample(COUNTS, seed=1)
    read, finish = [], FixedShapeSearch._finish
    monkeypatch.setattr(FixedShapeSearch, "_finish", lambda self, s, step, *args: read.append(step) or
                        finish(self, s, step, *args))
    found = generate(system, sample, "static", **BEAM_SETTINGS["min-len"])
    monkeypatch.undo()
    assert_same_search(found, generate(system, sample, "eager", **BEAM_SETTINGS["min-len"]))
    # step 0 forces <s>; the summary's first token is step 1, and min_len counts summary tokens
    assert read == [0, *range(BEAM_SETTINGS["min-len"]["min_len"] + 1, read[-1] + 1)]


def test_a_step_neither_copies_a_number_from_the_host_nor_reads_one_back(system):
    """A tensor made of a Python number is, on CUDA, a copy from the host, which a CUDA graph
    cannot capture; a number read back is a wait for the device."""
    operators = Dispatched()
    with operators:  # the unknown-word penalty, trigram blocking and the suppressed <s> all apply
        generate(system, system.make_sample(COUNTS, seed=2), operators.runner, unk_penalty=-1.0,
                 **BEAM_SETTINGS["lenpen-trigrams"])
    assert not operators.names & {"lift_fresh", "lift_fresh_copy", "_local_scalar_dense", "nonzero", "item"}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_the_fixed_shape_blocker_bans_what_the_step_loops_bans_at_every_position(n):
    rng = torch.Generator().manual_seed(n)
    rows, length, vocab = 6, 20, 7  # a small vocabulary, so that n-grams repeat
    tokens = torch.randint(4, vocab, (rows, length), generator=rng)
    lprobs = torch.randn(rows, vocab, generator=rng)
    banned_somewhere = False
    for position in range(length - 1):
        buffer = tokens.clone()
        buffer[:, position + 1 :] = 1  # padding after the history
        expected = ban_repeated_ngrams(tokens[:, : position + 1], lprobs.clone(), n)
        found = ban_repeated_ngrams_at(buffer, torch.tensor(position), lprobs.clone(), n)
        assert torch.equal(found.isinf(), expected.isinf()), f"position {position}"
        banned_somewhere |= bool(expected.isinf().any())
    assert banned_somewhere


def test_a_search_fixed_shapes_cannot_express_runs_step_by_step_and_says_why(copy_task_dir, caplog):
    system = build_system("pagesum", copy_task_dir)
    sample = system.make_sample(COUNTS, seed=2)
    sampling = dict(beam_size=3, max_len_b=12, search_strategy=search.Sampling(system.task.dictionary, sampling_topk=5))
    torch.manual_seed(5)
    expected = generate(system, sample, "eager", **sampling)
    torch.manual_seed(5)
    with caplog.at_level(logging.WARNING, logger="pagesum_plugin.generation.page_sequence_generator"):
        found = generate(system, sample, "static", **sampling)
    assert_same_search(found, expected)
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("pagesum_plugin.generation")]
    assert lines == ["decoding step by step, not as one graph per step: the Sampling search (only beam search "
                     "has fixed shapes)"]


def test_cuda_graphs_asked_for_on_the_cpu_decode_step_by_step_and_say_why(copy_task_dir, caplog):
    system = build_system("pagesum", copy_task_dir)
    sample = system.make_sample(COUNTS, seed=2)
    with caplog.at_level(logging.WARNING, logger="pagesum_plugin.generation.page_sequence_generator"):
        found = generate(system, sample, "graph", beam_size=2, max_len_b=10)
    assert_same_search(found, generate(system, sample, "eager", beam_size=2, max_len_b=10))
    assert "CUDA graphs need the search on a CUDA device" in caplog.text


def test_an_unknown_decoding_is_refused_in_one_line(copy_task_dir):
    system = build_system("pagesum", copy_task_dir)
    with pytest.raises(ValueError, match="decoding='fast': not one of auto, eager, static, graph, fused, nor a callable"):
        system.generator(decoding="fast")


def test_eager_decoding_is_the_tasks_flag(copy_task_dir):
    """--eager-decoding reaches the generator fairseq-generate builds; without it, "auto"."""
    for flags, expected in (((), "auto"), (("--eager-decoding",), "eager")):
        args, task, model = build_tiny(copy_task_dir, *flags)
        assert task.build_generator([model], args).decoding == expected


def test_compile_decoder_is_the_tasks_flag(copy_task_dir):
    """--compile-decoder reaches the generator fairseq-generate builds: it compiles every decoder
    layer (torch.compile compiles at the first call); without it, none."""
    for flags, expected in (((), False), (("--compile-decoder",), True)):
        args, task, model = build_tiny(copy_task_dir, "--decoder-layers", "2", *flags)
        task.build_generator([model], args)
        assert [getattr(layer, "_compiled_call_impl", None) is not None for layer in model.decoder.layers] == [
            expected] * 2


def test_a_later_search_of_the_same_shapes_replays_the_kept_step_on_its_own_state(system):
    """A generator keeps its last searches' steps: a batch of the same shapes runs its first step,
    copies the state it built into a kept search's tensors and replays that step (compiled
    once), finding its own hypotheses, the step loop's; a batch of other shapes gets a step of
    its own. (AWESOME's segments carry their memory in a state the copy does not walk: each of
    its searches compiles its own steps.)"""
    compiled = []
    generator = system.generator(decoding=lambda step: compiled.append(step) or step,
                                 **BEAM_SETTINGS["lenpen-trigrams"])
    first = system.make_sample(COUNTS, seed=1)
    src_tokens = first["net_input"]["src_tokens"]
    second = dict(first, net_input=dict(first["net_input"], src_tokens=src_tokens.flip(0)))  # other documents
    other = system.make_sample(COUNTS[:3], seed=1)
    counts = []
    for sample in (first, second, first, other):
        with torch.no_grad():
            found = generator.generate([system.model], sample)
        assert_same_search(found, generate(system, sample, "eager", **BEAM_SETTINGS["lenpen-trigrams"]))
        counts.append(len(compiled))
    if system.name != "awesome":
        assert counts == [1, 1, 1, 2]


def test_a_generator_keeps_the_steps_of_its_last_searches_only(copy_task_dir, monkeypatch):
    """Each kept step holds its search's state: the oldest goes when a new shape comes."""
    monkeypatch.setattr(static_search.KeptSearches.__init__, "__defaults__", (1,))
    system = build_system("pagesum", copy_task_dir)
    compiled = []
    generator = system.generator(decoding=lambda step: compiled.append(step) or step,
                                 **BEAM_SETTINGS["lenpen-trigrams"])
    for counts in (COUNTS, COUNTS[:3], COUNTS):
        with torch.no_grad():
            generator.generate([system.model], system.make_sample(counts, seed=1))
    assert len(compiled) == 3 and len(generator._kept.searches) == 1


@pytest.mark.parametrize("decoding", ["eager", "static"])
def test_every_search_of_a_generator_reorders_its_cache_within_blocks_of_beams(system, decoding, monkeypatch):
    """The beams' blocks are told at every search, not only when the generator is built: a later
    search's self-attention caches read through the beam table too, rather than moving rows."""
    blocks = []
    allocate = DecoderSelfAttention._allocate

    def recording(self, buffer, rows, beams, *args):
        blocks.append(beams)
        return allocate(self, buffer, rows, beams, *args)

    monkeypatch.setattr(DecoderSelfAttention, "_allocate", recording)
    generator = system.generator(decoding=decoding, **BEAM_SETTINGS["lenpen-trigrams"])
    for _ in range(2):
        with torch.no_grad():
            generator.generate([system.model], system.make_sample(COUNTS, seed=1))
    assert blocks and set(blocks) == {generator.beam_size}


def test_a_kept_step_is_not_replayed_on_a_state_whose_tensors_share_storage_otherwise():
    """The copy writes whole storages, one to one: where two tensors share a storage in one
    search and not in the other, the kept step would read the wrong data, and is not taken."""
    kept = static_search.KeptSearches()
    apart = [torch.zeros(3), torch.zeros(3)]
    key = static_search.signature(apart, torch.nn.Linear(1, 1))
    kept.keep(key, apart, "step")
    shared = torch.arange(3.0)
    assert kept.take(key, [shared, shared]) is None
    assert kept.take(key, [torch.ones(3), torch.full((3,), 2.0)]) == "step"
    assert apart[0].tolist() == [1.0, 1.0, 1.0] and apart[1].tolist() == [2.0, 2.0, 2.0]
