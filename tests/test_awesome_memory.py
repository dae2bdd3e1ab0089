"""AWESOME's memories: the writes of Eq. 1-6 and 9-12 on hand-computed tensors, and where
the gradients of training stop."""

import math
import weakref

import numpy as np
import pytest
import torch
from fairseq.criterions import build_criterion

from builders.awesome import build_awesome, randomize_memories, segment_sample
from pagesum_plugin.systems.awesome.memory import (
    CompressiveMemory,
    GatedMemoryUpdate,
    MemoryEncoderLayer,
    MemorySlots,
    PendingWrite,
    SegmentMemory,
    SegmentStates,
    replay,
)
from pagesum_recipes.profiling import HostSyncs


# --------------------------------------------------------------------------- Eq. 9-12


def gated_update(dim: int = 2, heads: int = 1) -> GatedMemoryUpdate:
    """Identity attention projections; W_u1 = I, W_u2 = 2I, W_g1 = I/2, W_g2 = -I; biases b_u, b_g."""
    update = GatedMemoryUpdate(dim, heads)
    eye = torch.eye(dim)
    with torch.no_grad():
        for proj in (update.attn.q_proj, update.attn.k_proj, update.attn.v_proj, update.attn.out_proj):
            proj.weight.copy_(eye)
            proj.bias.zero_()
        update.w_u1.weight.copy_(eye)
        update.w_u2.weight.copy_(2 * eye)
        update.w_u2.bias.copy_(torch.tensor([0.1, -0.2]))
        update.w_g1.weight.copy_(0.5 * eye)
        update.w_g2.weight.copy_(-eye)
        update.w_g2.bias.copy_(torch.tensor([0.3, 0.0]))
    return update.eval()


def test_gated_update_matches_eq_9_to_12_by_hand():
    update = gated_update()
    memory = torch.tensor([[[0.5, -1.0], [2.0, 0.0]]])  # (1 row, m=2, d=2)
    # Two equal states and a padded one: every slot's attention averages the equal states,
    # so S = [1, 2] for both slots whatever the scores (Eq. 12).
    states = torch.tensor([[[1.0, 2.0], [1.0, 2.0], [50.0, -50.0]]])
    padding = torch.tensor([[False, False, True]])
    new = update(memory, states, padding)
    s = (1.0, 2.0)
    b_u, b_g = (0.1, -0.2), (0.3, 0.0)
    for slot in range(2):
        for k in range(2):
            m = float(memory[0, slot, k])
            u = math.tanh(m + 2 * s[k] + b_u[k])  # Eq. 10
            g = 1 / (1 + math.exp(-(0.5 * m - s[k] + b_g[k])))  # Eq. 11
            assert new[0, slot, k].item() == pytest.approx(g * u + (1 - g) * m, abs=1e-6)  # Eq. 9


def test_gated_update_attends_with_the_slots_as_queries():
    update = gated_update()
    memory = torch.tensor([[[1.0, 0.0], [0.0, 3.0]]])
    states = torch.tensor([[[2.0, 0.0], [0.0, 2.0]]])
    new = update(memory, states)
    scores = memory[0] @ states[0].t() / math.sqrt(2)  # (m, len): queries M, keys H
    s = torch.softmax(scores, dim=1) @ states[0]  # values H
    u = torch.tanh(memory[0] + 2 * s + torch.tensor([0.1, -0.2]))
    g = torch.sigmoid(0.5 * memory[0] - s + torch.tensor([0.3, 0.0]))
    torch.testing.assert_close(new[0], g * u + (1 - g) * memory[0], atol=1e-6, rtol=0)


def test_the_gated_update_stops_the_gradient_at_the_segment_states():
    update = gated_update()
    memory = torch.randn(2, 2, 2, requires_grad=True)
    states = torch.randn(2, 3, 2, requires_grad=True)
    update(memory, states).sum().backward()
    assert states.grad is None  # SG(H)
    assert memory.grad is not None and update.w_g2.weight.grad is not None


# --------------------------------------------------------------------------- Eq. 1-6


def averaging_compressive(slots: int = 4, rate: int = 2, dim: int = 2) -> CompressiveMemory:
    """compress() = the mean of every ``rate`` consecutive vectors."""
    memory = CompressiveMemory(dim, slots, rate)
    with torch.no_grad():
        memory.compress.weight.copy_(torch.eye(dim).unsqueeze(-1).expand(dim, dim, rate) / rate)
        memory.compress.bias.zero_()
    return memory


def vectors(*values):
    return [torch.tensor([v, -v]) for v in values]


def test_compressive_update_matches_eq_1_to_6_by_hand():
    memory = averaging_compressive(slots=4, rate=2)
    c1, c2, u1, u2 = vectors(1.0, 2.0, 3.0, 4.0)
    h1, h2, h3, h4 = vectors(10.0, 20.0, 30.0, 40.0)
    full = MemorySlots(torch.stack([c1, c2, u1, u2]).unsqueeze(0), torch.zeros(1, 4, dtype=torch.bool))
    new = memory.write(full, torch.stack([h1, h2, h3, h4]).unsqueeze(0), torch.zeros(1, 4, dtype=torch.bool))
    # (2) M'_u = [u1 u2 h1 h2 h3 h4]; (3) M'_c = compress([u1 u2 h1 h2]) = [(u1+u2)/2, (h1+h2)/2]
    # (4) M_u = [h3 h4]; (5) M_c = [c1 c2 (u1+u2)/2 (h1+h2)/2][-2:]; (6) M = [M_c, M_u]
    expected = torch.stack([(u1 + u2) / 2, (h1 + h2) / 2, h3, h4])
    torch.testing.assert_close(new.values[0], expected)
    assert not new.empty.any()


def test_compressive_update_keeps_old_compressed_history_while_it_fits():
    memory = averaging_compressive(slots=4, rate=2)
    c2, u1, u2 = vectors(2.0, 3.0, 4.0)
    h1, h2 = vectors(10.0, 20.0)
    slots = MemorySlots(torch.stack([torch.zeros(2), c2, u1, u2]).unsqueeze(0), torch.tensor([[True, False, False, False]]))
    new = memory.write(slots, torch.stack([h1, h2]).unsqueeze(0), torch.zeros(1, 2, dtype=torch.bool))
    # M'_u = [u1 u2 h1 h2] pushes out [u1 u2] -> one compressed vector after c2
    torch.testing.assert_close(new.values[0], torch.stack([c2, (u1 + u2) / 2, h1, h2]))
    assert not new.empty.any()


def test_compressive_memory_fills_up_from_empty_and_ignores_padding():
    memory = averaging_compressive(slots=4, rate=2)
    h1, h2, h3 = vectors(10.0, 20.0, 30.0)
    empty = memory.initial_slots(1, torch.zeros(1, 2))
    assert empty.empty.all()
    states = torch.stack([h1, torch.full((2,), 99.0), h2]).unsqueeze(0)
    new = memory.write(empty, states, torch.tensor([[False, True, False]]))
    torch.testing.assert_close(new.values[0, 2:], torch.stack([h1, h2]))  # the padded state never enters
    assert new.empty.tolist() == [[True, True, False, False]]
    newer = memory.write(new, h3.view(1, 1, 2), torch.zeros(1, 1, dtype=torch.bool))
    # [h1 h2 h3] pushes out h1 alone: less than one compression window, so it is dropped
    torch.testing.assert_close(newer.values[0, 2:], torch.stack([h2, h3]))
    assert newer.empty.tolist() == [[True, True, False, False]]


def test_compressive_update_stops_the_gradient_at_the_states_but_trains_the_compression():
    memory = averaging_compressive(slots=4, rate=2)
    states = torch.randn(1, 6, 2, requires_grad=True)
    pending = PendingWrite(None, [SegmentStates(states, torch.zeros(1, 6, dtype=torch.bool))])
    resolved = replay(memory, pending, 1, torch.zeros(1, 2))[-1]
    resolved.values.sum().backward()
    assert states.grad is None
    assert memory.compress.weight.grad is not None and memory.compress.weight.grad.abs().sum() > 0


def written_row_by_row(memory: CompressiveMemory, slots: MemorySlots, states, padding) -> MemorySlots:
    """Eq. 1-6 applied to one row at a time, each half's entries picked out by its empty flags:
    the reference the batched write is held to."""
    half, rows = memory.slots // 2, []
    for row in range(states.size(0)):
        full = ~slots.empty[row]
        compressed = slots.values[row, :half][full[:half]]  # M_c^{t-1}                  (1)
        recent = torch.cat([slots.values[row, half:][full[half:]], states[row].detach()[~padding[row]]])  # (2)
        pushed, recent = recent[:max(len(recent) - half, 0)], recent[-half:]  # M_u^t     (4)
        usable = len(pushed) // memory.rate * memory.rate
        if usable:
            squeezed = memory.compress(pushed[:usable].t().unsqueeze(0)).squeeze(0).t()  # (3)
            compressed = torch.cat([compressed, squeezed])[-half:]  # M_c^t                (5)
        rows.append([(torch.cat([part.new_zeros(half - len(part), part.size(1)), part]),
                      torch.arange(half) < half - len(part)) for part in (compressed, recent)])
    return MemorySlots(torch.stack([torch.cat([c[0], u[0]]) for c, u in rows]),
                       torch.stack([torch.cat([c[1], u[1]]) for c, u in rows]))


def random_slots(rows: int, slots: int, dim: int, generator) -> MemorySlots:
    """Each half of each row holding a random number of entries, right-aligned, the empty slots zero."""
    half = slots // 2
    counts = torch.randint(0, half + 1, (rows, 2), generator=generator)
    empty = torch.cat([torch.arange(half) < half - counts[:, i:i + 1] for i in (0, 1)], 1)  # (rows, slots)
    values = torch.randn(rows, slots, dim, generator=generator).masked_fill(empty.unsqueeze(-1), 0)
    return MemorySlots(values.requires_grad_(), empty)


@pytest.mark.parametrize("slots, rate, length", [(4, 2, 6), (6, 3, 9), (8, 5, 16), (10, 5, 31), (8, 1, 5), (4, 5, 2)])
def test_the_batched_compressive_write_is_eq_1_to_6_applied_row_by_row(slots, rate, length):
    """Rows whose halves hold different numbers of entries, with padding anywhere in the segment
    (a row of padding only among them): the same slots, empty flags and gradients, with every
    case of the push (nothing pushed, less than one window, windows and a remainder dropped)."""
    generator = torch.Generator().manual_seed(slots * 100 + rate * 10 + length)
    memory = CompressiveMemory(3, slots, rate)
    rows = 6
    previous = random_slots(rows, slots, 3, generator)
    states = torch.randn(rows, length, 3, generator=generator)
    padding = torch.rand(rows, length, generator=generator) < 0.3
    padding[0] = True
    expected = written_row_by_row(memory, previous, states, padding)
    written = memory.write(previous, states, padding)
    assert torch.equal(written.empty, expected.empty)
    torch.testing.assert_close(written.values, expected.values, rtol=1e-6, atol=1e-6)
    pushed = (~previous.empty[:, slots // 2:]).sum(1) + (~padding).sum(1) - slots // 2  # (rows,) < 0: none
    if slots // 2 + length < slots // 2 + rate:
        assert (pushed < rate).all(), "never a whole window"
    else:
        assert (pushed >= rate).any() and (pushed <= 0).any(), "rows that compress, and rows that push nothing"
        assert rate == 1 or (pushed.clamp(min=0) % rate).any(), "a remainder dropped"

    weights = torch.randn(rows, slots, 3, generator=generator)
    inputs = [previous.values, *memory.compress.parameters()]
    grads = [torch.autograd.grad((result.values * weights).sum(), inputs, allow_unused=True, materialize_grads=True)
             for result in (written, expected)]
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_the_compressive_write_reads_nothing_back_from_the_device():
    generator = torch.Generator().manual_seed(0)
    memory = CompressiveMemory(3, 8, 2)
    previous = random_slots(4, 8, 3, generator)
    states, padding = torch.randn(4, 9, 3, generator=generator), torch.rand(4, 9, generator=generator) < 0.3
    with HostSyncs() as row_by_row:
        written_row_by_row(memory, previous, states, padding)
    assert row_by_row.seen, "picking entries out by their flags reads the device: the test would show nothing"
    with HostSyncs() as syncs:
        memory.write(previous, states, padding)
    assert syncs.seen == []


# --------------------------------------------------------------------------- training


@pytest.fixture(scope="module", params=["attentive", "compressive"])
def memory_model(request, copy_task_dir):
    args, task, model = build_awesome(copy_task_dir, "--memory", request.param)
    return args, task, randomize_memories(model).train()


def two_segments(task, seed=0, lengths=(6, 6)):
    rng = np.random.RandomState(seed)
    low, high = task.dictionary.nspecial, len(task.dictionary) - 8
    segments = [rng.randint(low, high, size=n).tolist() for n in lengths]
    summaries = [rng.randint(low, high, size=4).tolist() for _ in lengths]
    return segment_sample([segments], [summaries], task.dictionary)


def test_no_gradient_flows_from_a_segment_into_the_previous_segment(memory_model):
    args, task, model = memory_model
    sample = two_segments(task, lengths=(20, 6))  # long enough for the compressive memory to compress
    memory = SegmentMemory()
    steps = task.segment_steps(sample, memory)
    first = next(steps)
    logits1, extra1 = model(**first["net_input"])
    activations = [logits1, *extra1["inner_states"], *extra1["memory_states"]]
    second = next(steps)
    logits2, _ = model(**second["net_input"])
    loss2 = torch.nn.functional.cross_entropy(logits2.view(-1, logits2.size(-1)), second["target"].view(-1))
    grads = torch.autograd.grad(loss2, activations, allow_unused=True, retain_graph=True)
    assert all(g is None for g in grads), "segment 2's loss reached segment 1's activations"
    # ... but segment 1 reaches segment 2 through the memory, whose write is trained by segment 2's loss
    write_params = [p for n, p in model.named_parameters() if ".memory." in n and ("update" in n or "compress" in n)]
    write_grads = torch.autograd.grad(loss2, write_params, allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in write_grads)


def test_a_segment_reads_what_the_previous_segment_wrote(memory_model):
    args, task, model = memory_model
    losses = []
    for seed in (0, 1):
        sample = two_segments(task, seed=0)
        other = two_segments(task, seed=seed)
        sample["net_input"]["src_tokens"][:, 0] = other["net_input"]["src_tokens"][:, 0]  # segment 1 differs
        memory = SegmentMemory()
        steps = task.segment_steps(sample, memory)
        model.eval()
        with torch.no_grad():
            model(**next(steps)["net_input"])
            second = next(steps)
            losses.append(model(**second["net_input"])[0])
        model.train()
    assert not torch.allclose(losses[0], losses[1])


def autograd_graph_size(output: torch.Tensor) -> int:
    """Nodes of the autograd graph that backward from ``output`` would run."""
    seen, stack = set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


class _Saved:
    """A tensor saved for backward, packed so that its release can be seen."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


def train_step_footprint(task, model, criterion, segment_count: int, segment_tokens: int, summary_tokens: int):
    """(peak autograd graph size, peak bytes saved for backward) of one
    ``SegmentedSummarizationTask.train_step`` on a document of ``segment_count`` equal-sized
    segments: the graph is measured at every backward the step makes, and the saved bytes
    are those alive at any moment of the step (packed by a saved-tensors hook, released
    when autograd frees them), so a graph or a saved tensor kept from an earlier segment
    would count."""
    rng = np.random.RandomState(3)
    low, high = task.dictionary.nspecial, len(task.dictionary) - 8
    segments = [rng.randint(low, high, size=segment_tokens).tolist() for _ in range(segment_count)]
    summaries = [rng.randint(low, high, size=summary_tokens).tolist() for _ in range(segment_count)]
    sample = segment_sample([segments], [summaries], task.dictionary)
    alive, peak, graphs = [0], [0], []

    def release(size):
        alive[0] -= size

    def pack(tensor):
        saved, size = _Saved(tensor), tensor.numel() * tensor.element_size()
        alive[0] += size
        peak[0] = max(peak[0], alive[0])
        weakref.finalize(saved, release, size)
        return saved

    class Optimizer:  # what train_step asks of fairseq's optimizer
        def backward(self, loss):
            graphs.append(autograd_graph_size(loss))
            loss.backward()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved.tensor):
        task.train_step(sample, model, criterion, Optimizer(), update_num=0)
    assert len(graphs) == segment_count and alive[0] == 0, "every segment's graph is freed by its own backward"
    return max(graphs), peak[0]


def test_the_peak_graph_and_saved_memory_of_a_training_step_do_not_grow_with_the_segment_count(memory_model):
    """Sec. 3.1 and the issue: "gradients stop at the segment activations only. This is what
    keeps training memory flat." The task's train_step back-propagates every segment's loss
    before the next segment runs, and a segment's graph holds one memory write per memory
    layer: a 16-segment document's step peaks where a 2-segment document's does.

    The segments and summaries are long enough that a single write fills every slot of the
    compressive memory (m/2 recent states, and r * m/2 states pushed out and compressed into
    the other m/2, Eq. 2-5): with shorter ones it fills over the first writes, and its
    indexing saves a little more until it is full, bounded by m but not flat from the
    second segment on."""
    args, task, model = memory_model
    assert model.memory_grad_segments == 1
    (graph_2, saved_2), (graph_16, saved_16) = footprints(args, task, model, 2, 16)
    assert graph_16 == graph_2, f"autograd graph nodes: {graph_2} with 2 segments, {graph_16} with 16"
    assert saved_16 == saved_2, f"bytes saved for backward: {saved_2} with 2 segments, {saved_16} with 16"


def footprints(args, task, model, *segment_counts):
    """``train_step_footprint`` for documents of each of ``segment_counts`` segments, long
    enough that one write fills the compressive memory (see the test below)."""
    criterion = build_criterion(args, task)
    half = args.memory_slots // 2
    tokens = half + args.compression_rate * half  # states a write must see to fill the memory
    sizes = dict(segment_tokens=tokens - 2, summary_tokens=tokens - 2)  # besides <s> </s> (summary: </s> <s>)
    return [train_step_footprint(task, model, criterion, n, **sizes) for n in segment_counts]


@pytest.mark.parametrize("kind", ["attentive", "compressive"])
def test_a_window_of_k_writes_keeps_training_memory_flat_past_k_plus_1_segments(copy_task_dir, kind):
    """With --memory-grad-segments 2 every segment from the third on replays two writes in its
    graph: a 16-segment document's step peaks where a 3-segment document's does."""
    args, task, model = build_awesome(copy_task_dir, "--memory", kind, "--memory-grad-segments", "2")
    model = randomize_memories(model).train()
    (graph_3, saved_3), (graph_16, saved_16) = footprints(args, task, model, 3, 16)
    assert (graph_16, saved_16) == (graph_3, saved_3)


def test_an_unbounded_window_grows_with_the_document(copy_task_dir):
    """--memory-grad-segments 0 replays every earlier write (Eq. 9-12 with no truncation):
    the graph, and the memory of training, grow with the number of segments."""
    args, task, model = build_awesome(copy_task_dir, "--memory-grad-segments", "0")
    model = randomize_memories(model).train()
    (graph_3, saved_3), (graph_8, saved_8) = footprints(args, task, model, 3, 8)
    assert graph_8 > graph_3 and saved_8 > saved_3


def initial_memory_gradients(task, model, segment_count: int) -> list:
    """|dL_t / dM^0| for the loss L_t of every segment t of one document, summed over the
    memory layers: each segment's graph, as a training step builds and frees it."""
    rng = np.random.RandomState(5)
    low, high = task.dictionary.nspecial, len(task.dictionary) - 8
    segments = [rng.randint(low, high, size=10).tolist() for _ in range(segment_count)]
    summaries = [rng.randint(low, high, size=5).tolist() for _ in range(segment_count)]
    sample = segment_sample([segments], [summaries], task.dictionary)
    initial = [p for n, p in model.named_parameters() if n.endswith(".memory.initial")]
    norms = []
    for step in task.segment_steps(sample, SegmentMemory()):
        logits, _ = model(**step["net_input"])
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), step["target"].view(-1))
        grads = torch.autograd.grad(loss, initial, allow_unused=True)
        norms.append(sum(float(g.norm()) for g in grads if g is not None))
    return norms


@pytest.mark.parametrize("window", [1, 2, 3])
def test_the_gradient_reaches_the_initial_memory_from_every_segment_inside_the_window(copy_task_dir, window):
    """Eq. 9-12 stop the gradient on the segment states only, so the learned M^0 is trained
    through the memory's writes: with --memory-grad-segments K the loss of segment t reaches
    M^0 for t <= K + 1 (M^0 read at once, or through the writes of segments 1 .. t-1), and
    no loss beyond the window does."""
    _, task, model = build_awesome(copy_task_dir, "--memory-grad-segments", str(window))
    model = randomize_memories(model).train()
    norms = initial_memory_gradients(task, model, 6)
    assert all(norm > 0 for norm in norms[: window + 1]), norms
    assert all(norm == 0 for norm in norms[window + 1:]), norms


def test_a_replayed_write_computes_the_memory_the_next_segment_read(copy_task_dir):
    """With a window of two writes, segment 3 replays segment 1's write: with dropout on, the
    M^1 it rebuilds is the M^1 that segment 2 read, bit for bit."""
    _, task, model = build_awesome(copy_task_dir, "--memory-grad-segments", "2", "--attention-dropout", "0.5")
    model = randomize_memories(model).train()
    memory = SegmentMemory()
    steps = task.segment_steps(two_segments(task, lengths=(8, 8, 8)), memory)
    model(**next(steps)["net_input"])
    read_by_2, _ = model.read_memory(memory, 1)  # encoder layers' M^1, as segment 2 reads it
    model(**next(steps)["net_input"])
    window_at_3, _ = model.memory_windows(memory, 1)  # per layer [M^0, M^1, M^2]
    for chain, slots in zip(window_at_3, read_by_2):
        assert torch.equal(chain[1].values, slots.values)
    layer = model.encoder.memories[0]
    pending = memory.encoder[0].writes[0]
    fresh = [layer.write(chain[0], pending.states, pending.padding).values for chain in window_at_3[:1] * 2]
    assert not torch.equal(*fresh), "dropout is on: only the recorded seed makes the replay exact"


# --------------------------------------------------------------------------- what the encoder reads


def heads_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int, padding=None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_head)) v per head, written out: q (len, rows, dim), k and v
    (keys, rows, dim), padding (rows, keys) bool -> (len, rows, dim)."""
    length, rows, dim = q.shape
    split = lambda t: t.reshape(t.size(0), rows, heads, dim // heads).permute(1, 2, 0, 3)  # (rows, heads, n, d_head)
    scores = split(q) @ split(k).transpose(-1, -2) / math.sqrt(dim // heads)  # (rows, heads, len, keys)
    if padding is not None:
        scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
    out = scores.softmax(-1) @ split(v)  # (rows, heads, len, d_head)
    return out.permute(2, 0, 1, 3).reshape(length, rows, dim)


def projected_attention(attn, query, memory, heads, padding=None):
    """A fairseq attention module's computation with its own weights, by hand."""
    out = heads_attention(attn.q_proj(query), attn.k_proj(memory), attn.v_proj(memory), heads, padding)
    return attn.out_proj(out)


def by_hand_feed_forward(layer, x):
    """BART's feed-forward sublayer, post-norm: LN(x + W2 gelu(W1 x + b1) + b2)."""
    hidden = torch.nn.functional.gelu(torch.nn.functional.linear(x, layer.fc1.weight, layer.fc1.bias))
    return layer.final_layer_norm(x + torch.nn.functional.linear(hidden, layer.fc2.weight, layer.fc2.bias))


@pytest.fixture(scope="module", params=["attentive", "compressive"])
def memory_encoder(request, copy_task_dir):
    args, task, model = build_awesome(copy_task_dir, "--memory", request.param)
    return args, randomize_memories(model).eval().encoder


def some_slots(memory_layer, rows: int, dim: int, seed: int, empty_first: int = 0) -> MemorySlots:
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(rows, memory_layer.memory.slots, dim, generator=generator)
    empty = torch.zeros(rows, memory_layer.memory.slots, dtype=torch.bool)
    empty[:, :empty_first] = True
    return MemorySlots(values, empty)


def test_a_memory_encoder_layer_reads_its_slots_as_the_paper_says(memory_encoder):
    """attentive: x -> LN(x + SelfAttn(x)) = H_self -> LN(H_self + Attn(H_self, M, M)) -> FFN, and
    H_self is what the layer writes (Eq. 12); compressive: self-attention whose keys and values are
    concat(M, x), empty slots masked (Eq. 7-8) -> FFN, and the layer's input is what it writes (Eq. 2)."""
    args, encoder = memory_encoder
    layer = next(layer for layer in encoder.layers if isinstance(layer, MemoryEncoderLayer))
    heads, dim = args.encoder_attention_heads, args.encoder_embed_dim
    x = torch.randn(5, 2, dim, generator=torch.Generator().manual_seed(3))  # (len, rows, dim)
    slots = some_slots(layer, rows=2, dim=dim, seed=4, empty_first=2)
    with torch.no_grad():
        out, written = layer(x, None, memory_slots=slots)
        if layer.memory.kind == "attentive":
            h_self = layer.self_attn_layer_norm(x + projected_attention(layer.self_attn, x, x, heads))
            memory = slots.values.transpose(0, 1)  # (m, rows, dim)
            read = layer.memory.read_layer_norm(
                h_self + projected_attention(layer.memory.read_attn, h_self, memory, heads, slots.empty))
            expected, expected_written = by_hand_feed_forward(layer, read), h_self
        else:
            keys = torch.cat([slots.values.transpose(0, 1), x])  # (m + len, rows, dim)
            padding = torch.cat([slots.empty, torch.zeros(2, 5, dtype=torch.bool)], dim=1)
            attended = layer.self_attn_layer_norm(x + projected_attention(layer.self_attn, x, keys, heads, padding))
            expected, expected_written = by_hand_feed_forward(layer, attended), x
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(written, expected_written, rtol=1e-6, atol=1e-6)


def test_the_encoder_hands_every_memory_layer_its_own_slots(memory_encoder):
    """The encoder's output is its layers run in order, each memory layer reading the slots of
    its own position in ``encoder_memory``; the slots of one layer change the output, and nothing
    before that layer."""
    args, encoder = memory_encoder
    memory_layers = [layer for layer in encoder.layers if isinstance(layer, MemoryEncoderLayer)]
    tokens = torch.randint(4, 40, (2, 6), generator=torch.Generator().manual_seed(5))
    slots = [some_slots(layer, 2, args.encoder_embed_dim, seed=10 + i) for i, layer in enumerate(memory_layers)]
    with torch.no_grad():
        out = encoder(tokens, encoder_memory=slots, return_all_hiddens=True)
        x, _ = encoder.forward_embedding(tokens)
        x = x.transpose(0, 1)  # (len, rows, dim)
        own = iter(slots)
        for layer in encoder.layers:
            x = layer(x, None, memory_slots=next(own))[0] if layer in memory_layers else layer(x, None)
        torch.testing.assert_close(out["encoder_out"][0], x, rtol=1e-5, atol=1e-5)

        changed = list(slots)
        changed[-1] = some_slots(memory_layers[-1], 2, args.encoder_embed_dim, seed=99)
        other = encoder(tokens, encoder_memory=changed, return_all_hiddens=True)
    last = list(encoder.layers).index(memory_layers[-1])
    for before, (a, b) in enumerate(zip(out["encoder_states"][: last + 1], other["encoder_states"][: last + 1])):
        torch.testing.assert_close(a, b, msg=f"the input of layer {before} changed with a later layer's memory")
    assert not torch.allclose(out["encoder_out"][0], other["encoder_out"][0])
