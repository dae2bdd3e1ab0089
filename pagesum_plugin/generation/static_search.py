"""Beam search with fixed shapes: every step after the first is one function of the same
tensors, which a CUDA graph captures once and replays.

On a GPU, a decoding step of the step loop (``search_loop.py``) is bound by the host: it
launches about 1,600 operators one by one, and the GPU is busy for a tenth of the step
(docs/benchmarks/gpu.md). A graph launches them all at once, but only if no step changes a
shape, reads a number back, or keeps a Python count. This search arranges the step loop so:

* the examples that are done stay in the batch, their hypotheses masked, instead of being
  cut out at every step (which changes every shape); their rows keep being decoded, until at
  most half the batch is left (``HeldExamples``): then the search cuts the batch down to the
  examples not done, as the step loop would, and goes on with a step of that batch;
* the position is a 0-d tensor that the step advances itself; the decoder is given each
  hypothesis's newest token and that position (``modules/decoding_step.py``), and its
  self-attention writes there and reads its whole preallocated cache, masked past it;
* every state is written in place: the tokens, scores and page weights of the beams, the
  self-attention caches and the beam tables that reorder them;
* the search's rules (minimum and maximum length, suppressed tokens, n-gram blocking) are
  masks computed from the position, and beam search's top-k reads the last scores at it.

A step then runs: continue every example with its best candidates of the last step (the
loop's ``_extend``), move the decoder state with the beams, decode, apply the rules, propose
the next candidates and mark those that end a hypothesis. Between two steps the host reads
back which hypotheses ended (the loop's one wait), finishes them, and stops when every
example is done or the longest summary is reached; before the minimum length, where no
hypothesis can end, it reads nothing back and launches the next step at once. The first step, which forces the
summary's ``<s>``, builds the decoder's state and allocates the caches, runs as in the loop.

``step`` says how the step runs: ``"graph"`` captures it on CUDA (``torch.cuda.CUDAGraph``)
at the second step and replays it after; ``"fused"`` first compiles it whole with inductor
(``torch.compile(fullgraph=True)``), which fuses its kernels, then captures that on CUDA (the
first search pays the compilation; later searches of the same batch, beam and length reuse
it: the buffers are sized to the search's length); ``"static"``
runs it op by op; a callable compiles it (``lambda step: torch.compile(step, fullgraph=True,
backend=...)``: the proof, on any device, that a step has no graph break). Each gives the step
loop's hypotheses: the same tokens, scores to rounding (``tests/test_static_search.py``).

A fixed-shape step reads the self-attention caches only as far as its position needs, rounded up
to a multiple of ``READ_BUCKET`` positions (``ReadLengthSteps``): a search captures a graph for
each such length, the first time a step needs it, all in one memory pool, so that its early
steps do not read the whole cache. A compiled step reads the whole cache: each length would
compile anew.

A batch cut down is a batch of new shapes: its steps are captured again, by length, the first time
each is needed (``"graph"``), or run op by op (``"static"``). A compiled step is never cut down:
each batch would compile anew. A batch cut down at least halves, so a search of E examples makes
at most log2(E) of them.

A generator keeps the captured steps of its last ``KEPT_SEARCHES`` searches (``KeptSearches``).
A later search whose state has the same shapes (the batch, beam, pages, source and summary
lengths) runs its first step as always, copies the state that step built into the kept
search's tensors, and replays the kept step: no capture, no warm-up and no compilation (the
steps of a batch cut down are not kept). The
tensors a step reads are walked in a fixed order (``state_leaves``): a state holding anything
the walk does not know is not reused, and neither is a step whose model's weights moved.

What the fixed shapes cannot express falls back to the step loop, in one line that says why
(``refusal``): ensembles and language-model fusion, search strategies other than beam search
(sampling, diverse beams, constraints, length-matched search), the patient search, forced
prefixes longer than the ``<s>``, and a model whose encoder output follows the beams (one copy per beam: AWESOME's
segments, and PageSum's ``set_beam_size(beam, share_pages=False)``).
"""

import dataclasses
import logging
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Dict, Hashable, List, Optional, Tuple, Union

import torch
from fairseq import search
from torch import Tensor

from ..modules.compiled_layers import compiled
from ..modules.decoder_self_attention import DecoderSelfAttention, set_fixed_shapes, set_read_length
from ..modules.decoding_step import declare_unpadded_prefixes, set_step_position
from ..modules.page_mixing import PageLayout
from .search_loop import Beams, Candidates, Hypotheses, best_first, ended_candidates

logger = logging.getLogger(__name__)

StepRunner = Union[str, Callable[[Callable[[], None]], Callable[[], None]]]  # graph, fused, static, or a compiler
KEPT_SEARCHES = 2  # captured steps a generator keeps (with their state) for later searches of the same shapes
READ_BUCKET = 64  # a step reads the self-attention caches a multiple of this many positions long (graph, static)


def refusal(generator, sample: Dict, prefix_tokens: Optional[Tensor], constraints: Optional[Tensor]) -> Optional[str]:
    """Why ``generator`` cannot search ``sample`` with fixed shapes, or None where it can."""
    if generator.model.models_size != 1:
        return "an ensemble of models"
    if generator.lm_model is not None:
        return "language-model fusion"
    if type(generator.search) is not search.BeamSearch:
        return f"the {type(generator.search).__name__} search (only beam search has fixed shapes)"
    if constraints is not None:
        return "lexical constraints"
    if generator.match_source_len:
        return "--match-source-len"
    if prefix_tokens is not None and prefix_tokens.size(1) > 1:
        return "a forced prefix of more than one token"
    if generator.patient:
        return "the patient search (--patient-search), which reads each step's best candidates back"
    return None


@dataclass
class FixedState:
    """Everything a step reads and writes, allocated once per search (E examples, B beams,
    R = E * B hypothesis rows, C = 2 * B candidates, V the vocabulary)."""

    beams: Beams  # tokens (R, L + 2), scores (R, L + 1), attention (R, pages, L + 2) or None, ignored (E, B)
    candidates: Candidates  # scores, tokens, beams: (E, C), the last step's proposals
    ended: Tensor  # (E, B) bool: candidates among each example's B best that end a hypothesis
    done: Tensor  # (E,) bool: examples with all their hypotheses
    position: Tensor  # () long: the step's position; the last step's until a step advances it
    lengths: Tensor  # (2,) long: the search's minimum and maximum length in steps (tensors: a compiled step
    #                  serves searches of any length)


class FixedShapeSearch:
    """One beam search of ``generator`` (a ``SearchLoop``) with fixed shapes."""

    def __init__(self, generator, step: StepRunner = "static", kept: Optional["KeptSearches"] = None):
        self.generator = generator
        self.runner = step
        # the generator's captured steps, for searches of the same shapes; None: none kept (nor, op by op,
        # anything to save by keeping them)
        self.kept = None if step == "static" else kept
        # a step of new shapes (a read length, a batch cut down) is captured or run as it is, not
        # compiled anew: only then does the search make such steps
        self.reshapes = step in ("graph", "static")
        self.on_cuda = False  # the search's device, known when it starts
        self.pool = None  # the memory pool of the graphs this search captures, once it captures one

    def __call__(self, sample: Dict[str, Dict[str, Tensor]], prefix_tokens: Optional[Tensor] = None,
                 bos_token: Optional[int] = None) -> Hypotheses:
        model = self.generator.model.single_model
        set_fixed_shapes(model, True)
        set_read_length(model, None)  # each module holds it from the first step on, where a compiled step looks
        try:
            return self._search(sample, prefix_tokens, bos_token)
        finally:
            set_fixed_shapes(model, False)
            set_read_length(model, None)

    def _search(self, sample: Dict[str, Dict[str, Tensor]], prefix_tokens: Optional[Tensor],
                bos_token: Optional[int]) -> Hypotheses:
        g = self.generator
        src_tokens = sample["net_input"]["src_tokens"]
        examples, beam, device = src_tokens.size(0), g.beam_size, src_tokens.device
        self.on_cuda = device.type == "cuda"
        beams, max_len = g._start(sample, prefix_tokens, bos_token)
        order = torch.arange(examples, device=device)[:, None].expand(examples, beam).reshape(-1)
        # Each example's rows expanded to its beams once (a no-op where the beams share them). No
        # step reorders the encoder output: beam search moves a hypothesis only among its own
        # example's beams, whose rows are the same, and examples leave the batch only when it is
        # cut down, which reorders it (``_cut_down``).
        encoder_outs = g.model.reorder_encoder_out(g.model.forward_encoder(sample["net_input"]), order)
        states: List[Dict[str, Dict[str, Optional[Tensor]]]] = [{}]
        position = torch.zeros((), dtype=torch.long, device=device)
        set_step_position(states[0], position)
        declare_unpadded_prefixes(states[0])
        suppressed = None if g.token_indices_to_suppress is None else g.token_indices_to_suppress.to(device)
        finalized: Hypotheses = [[] for _ in range(examples)]

        # the first step, as the step loop runs it: it forces <s> and builds the decoder's state
        lprobs = g._next_log_probs(beams, 0, max_len, encoder_outs, states, suppressed)  # (R, V)
        candidates = g._candidates(beams, 0, lprobs)
        state = FixedState(beams, candidates, torch.zeros(examples, beam, dtype=torch.bool, device=device),
                           torch.zeros(examples, dtype=torch.bool, device=device), position,
                           torch.tensor([g.min_len, max_len], device=device))
        state.ended.copy_(ended_candidates(candidates, g.eos)[:, :beam] & ~beams.ignored)
        batch = HeldExamples(examples)
        remaining = examples - self._finish(state, 0, max_len, finalized, batch)
        if remaining == 0:
            return best_first(finalized)

        # the step, and the state, encoder output and decoder state it reads: a kept search's, where one is kept
        step_fn, (state, encoder_outs, states) = self._step_function(state, encoder_outs, states, suppressed, max_len)
        kept = self.kept is not None  # they may be a kept search's: cutting the batch down leaves them as they are
        for step in range(1, max_len + 1):  # the last step can only add </s>
            step_fn(step)
            if step < g.min_len:  # </s> is banned before the minimum length: nothing ended, nothing to read back
                continue
            remaining -= self._finish(state, step, max_len, finalized, batch)
            if remaining == 0 or (g.search.stop_on_max_len and step >= max_len):
                break
            if self.reshapes and batch.worth_cutting():
                state, encoder_outs, states = self._cut_down(state, batch, encoder_outs, states, copy=kept)
                step_fn, _ = self._step_function(state, encoder_outs, states, suppressed, max_len, keep=False)
                kept = False
        return best_first(finalized)

    # ---- one step, every shape fixed ---------------------------------------------------------------

    def _step(self, s: FixedState, encoder_outs, states, suppressed: Optional[Tensor]) -> None:
        g, beams = self.generator, s.beams
        examples, beam = beams.ignored.shape
        order = self._extend(s)  # (R,) the row each hypothesis continues
        s.position.add_(1)
        g.model.reorder_incremental_state(states, order)
        newest = beams.tokens.index_select(1, s.position.view(1))  # (R, 1)
        lprobs, attention = g.model.forward_decoder(newest, encoder_outs, states, g.temperature)  # (R, V)
        lprobs = self._apply_rules(lprobs, s.position, s.lengths, suppressed)
        if attention is not None:  # the page weights of the step: (R, pages)
            beams.attention.index_copy_(2, (s.position + 1).view(1), attention.unsqueeze(2))
        if g.repeat_ngram_blocker is not None:
            lprobs = ban_repeated_ngrams_at(beams.tokens, s.position, lprobs,
                                            g.repeat_ngram_blocker.no_repeat_ngram_size)
        # beam search's step after the first: each hypothesis's score so far plus the next token's
        last = beams.scores.index_select(1, (s.position - 1).clamp(min=0).view(1))  # (R, 1)
        totals = (lprobs + last).view(examples, -1)  # (E, B * V)
        scores, indices = totals.topk(min(2 * beam, totals.size(1) - 1))  # (E, C)
        s.candidates.scores.copy_(scores)
        s.candidates.tokens.copy_(indices.fmod(g.vocab_size))
        s.candidates.beams.copy_(torch.div(indices, g.vocab_size, rounding_mode="trunc"))
        s.ended.copy_(ended_candidates(s.candidates, g.eos)[:, :beam] & ~beams.ignored & ~s.done[:, None])

    def _extend(self, s: FixedState) -> Tensor:
        """The step loop's ``_extend`` of the last step's candidates at ``s.position``, in place
        over whole rows; returns the row (R,) that each hypothesis continues."""
        beams, candidates = s.beams, s.candidates
        examples, beam = beams.ignored.shape
        width = candidates.tokens.size(1)
        unavailable = ended_candidates(candidates, self.generator.eos)  # (E, C)
        unavailable[:, :beam] |= beams.ignored
        rank = unavailable.long() * width + torch.arange(width, device=unavailable.device)
        ranks, picked = rank.topk(beam, dim=1, largest=False)  # (E, B)
        beams.ignored.copy_(ranks >= width)
        rows = (candidates.beams.gather(1, picked) + beams.offsets).view(-1)  # (R,)
        at = s.position.view(1)
        beams.tokens.copy_(beams.tokens.index_select(0, rows))  # positions after the step are still padding
        beams.tokens.index_copy_(1, at + 1, candidates.tokens.gather(1, picked).view(-1, 1))
        beams.scores.copy_(beams.scores.index_select(0, rows))
        beams.scores.index_copy_(1, at, candidates.scores.gather(1, picked).view(-1, 1))
        if beams.attention is not None:
            beams.attention.copy_(beams.attention.index_select(0, rows))
        return rows

    def _apply_rules(self, lprobs: Tensor, position: Tensor, lengths: Tensor, suppressed: Optional[Tensor]) -> Tensor:
        """The step loop's rules (``_next_log_probs``) after the forced prefix, as masks of the
        position: no NaN, no padding, the unknown-word penalty, only </s> at the last step, no
        </s> before the minimum length, no suppressed token."""
        g = self.generator
        # (no assignment of a Python number through indexing: it copies a CPU scalar to the device,
        # which a CUDA graph cannot capture)
        lprobs.masked_fill_(torch.isnan(lprobs), -math.inf)
        lprobs[:, g.pad].fill_(-math.inf)
        if g.unk_penalty:
            lprobs[:, g.unk].sub_(g.unk_penalty)
        vocab = torch.arange(lprobs.size(1), device=lprobs.device)
        lprobs.masked_fill_((vocab != g.eos) & (position >= lengths[1]), -math.inf)
        lprobs[:, g.eos].masked_fill_(position < lengths[0], -math.inf)
        if suppressed is not None:
            lprobs.index_fill_(1, suppressed, -math.inf)
        return lprobs

    # ---- between steps, on the host ---------------------------------------------------------------

    def _finish(self, s: FixedState, step: int, max_len: int, finalized: Hypotheses, batch: "HeldExamples") -> int:
        """Finish the hypotheses that ended at ``step`` (the one read-back of a step) as fairseq
        does, and mark the examples that are now done; returns how many are."""
        g, beam = self.generator, self.generator.beam_size
        example, rank = s.ended.nonzero(as_tuple=True)
        if example.numel() == 0:
            return 0
        beams, candidates = s.beams, s.candidates
        rows = candidates.beams[example, rank] + beams.offsets[example, 0]  # (ended,)
        # fairseq's finalize_hypos, told which examples left the batch: it maps the batch's examples to
        # the sample's (a copy: it marks those it finishes, which stay in the batch)
        done = g.finalize_hypos(step, rows, candidates.scores[example, rank], beams.tokens, beams.scores, finalized,
                                list(batch.dropped), beam, beams.attention, beams.src_lengths, max_len)
        if done:
            s.done[torch.tensor(done, device=s.done.device)] = True
            batch.finish(done)
        return len(done)

    def _cut_down(self, s: FixedState, batch: "HeldExamples", encoder_outs, states, copy: bool):
        """The search's state, encoder output and decoder state for the examples of the batch that
        are not done, as the step loop drops them (``copy``: the decoder state's dictionaries are
        copied first, where a kept search's step reads the originals)."""
        g = self.generator
        keep = torch.tensor(batch.cut_down(), device=s.done.device)  # (kept,) the examples' places in the batch
        rows = (keep[:, None] * g.beam_size + torch.arange(g.beam_size, device=keep.device)).view(-1)  # (kept * beam,)
        if copy:
            # (a module's buffer is a dictionary it updates; anything else is replaced, never changed)
            states = [{name: dict(entry) if isinstance(entry, dict) else entry for name, entry in state.items()}
                      for state in states]
        g.model.reorder_incremental_state(states, rows)
        encoder_outs = g.model.reorder_encoder_out(encoder_outs, rows)
        state = FixedState(s.beams.select(keep), s.candidates.select(keep), s.ended[keep], s.done[keep], s.position,
                           s.lengths)
        return state, encoder_outs, states

    def _step_function(self, state: FixedState, encoder_outs, states, suppressed: Optional[Tensor],
                       max_len: int, keep: bool = True) -> Tuple["ReadLengthSteps", Tuple[FixedState, object, object]]:
        """The step of this search (``ReadLengthSteps``, called with the position it decodes), and
        what it reads (the search's state, encoder output and decoder state): a kept search's step
        and tensors, this search's copied in, where one of the same shapes is kept; else a new step
        (kept for later searches, if ``keep``)."""
        def step() -> None:
            self._step(state, encoder_outs, states, suppressed)

        def new_steps() -> ReadLengthSteps:
            # graphs captured op by op take a read length each, all the search's in one memory pool (they
            # never run at once, and a step keeps nothing it allocates); a compiled step would compile once for each
            bucket = READ_BUCKET if self.reshapes else None
            if self.on_cuda and self.runner == "graph" and self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            return ReadLengthSteps(step, lambda each: self._runner(each, self.pool), self.generator.model.single_model,
                                   max_len + 1, bucket)

        if self.kept is None or not keep:
            return new_steps(), (state, encoder_outs, states)
        leaves = state_leaves((state, encoder_outs, states, suppressed))
        key = signature(leaves, self.generator.model.single_model)
        kept = self.kept.take(key, leaves)
        if kept is not None:
            return kept
        steps = new_steps()
        self.kept.keep(key, leaves, (steps, (state, encoder_outs, states)))
        return steps, (state, encoder_outs, states)

    def _runner(self, step: Callable[[], None], pool=None) -> Callable[[], None]:
        if callable(self.runner):
            return self.runner(step)
        if self.runner == "fused":
            step = compiled(step, fullgraph=True)
        if self.runner == "graph" or (self.runner == "fused" and self.on_cuda):
            return CapturedStep(step, pool)
        return step


class HeldExamples:
    """Which of a search's examples its batch holds, in order (those not dropped), and which of
    those are done, known on the host from the hypotheses it finished. The batch is worth cutting
    down to the examples not done once they are at most half of it."""

    def __init__(self, examples: int):
        self.dropped = [False] * examples  # by the sample's examples: no longer in the batch
        self.done = [False] * examples  # by the batch's examples: all their hypotheses found

    def finish(self, done: List[int]) -> None:
        for i in done:
            self.done[i] = True

    def worth_cutting(self) -> bool:
        left = self.done.count(False)
        return 0 < left <= len(self.done) // 2

    def cut_down(self) -> List[int]:
        """Drop the examples that are done; returns the places in the batch of those kept."""
        held = [i for i, dropped in enumerate(self.dropped) if not dropped]  # the batch's examples in the sample
        for example, done in zip(held, self.done):
            self.dropped[example] = done
        kept = [i for i, done in enumerate(self.done) if not done]
        self.done = [False] * len(kept)
        return kept


def state_leaves(tree) -> Optional[List[object]]:
    """Every tensor and value of a search's state, in a fixed order: dictionaries (keys too),
    lists, tuples, dataclasses (the search's state) and page layouts are walked; None where
    something else is found, whose content the walk cannot compare."""
    leaves: List[object] = []

    def walk(node) -> bool:
        if torch.is_tensor(node) or node is None or isinstance(node, (bool, int, float, str)):
            leaves.append(node)
        elif isinstance(node, dict):
            leaves.append(len(node))
            return all(walk(key) and walk(value) for key, value in node.items())
        elif isinstance(node, (list, tuple)):
            leaves.append(len(node))
            return all(walk(item) for item in node)
        elif dataclasses.is_dataclass(node) or isinstance(node, PageLayout):
            leaves.append(type(node).__name__)
            return walk(vars(node))
        else:
            return False
        return True

    return leaves if walk(tree) else None


def signature(leaves: Optional[List[object]], model: torch.nn.Module) -> Optional[Hashable]:
    """What two searches must share for one to replay the other's captured step: every tensor's
    shape, layout and storage size and every other value of their state, and the model's weights
    where they lie (the graph reads them there). None: not comparable."""
    if leaves is None:
        return None
    shapes = tuple((tuple(leaf.shape), leaf.stride(), leaf.storage_offset(), leaf.dtype, str(leaf.device),
                    leaf.untyped_storage().nbytes()) if torch.is_tensor(leaf) else leaf for leaf in leaves)
    return shapes, tuple(p.data_ptr() for p in model.parameters())


class KeptSearches:
    """The captured steps of a generator's last ``size`` searches, each with the tensors it reads,
    by the ``signature`` of their state."""

    def __init__(self, size: int = KEPT_SEARCHES):
        self.size = size
        self.searches: "OrderedDict[Hashable, Tuple[List[object], object]]" = OrderedDict()

    def take(self, key: Optional[Hashable], leaves: Optional[List[object]]):
        """The kept search of ``key``, with this search's state (``leaves``) copied into its
        tensors; None where there is none, or where the two states share storage differently."""
        if key is None or key not in self.searches:
            return None
        kept_leaves, kept = self.searches[key]
        pairs, sources = {}, {}  # kept storage -> this search's storage, one to one: whole storages, each once
        for mine, theirs in zip(leaves, kept_leaves):
            if torch.is_tensor(mine):
                target, source = theirs.untyped_storage(), mine.untyped_storage()
                if (pairs.setdefault(target.data_ptr(), (target, source))[1].data_ptr() != source.data_ptr()
                        or sources.setdefault(source.data_ptr(), target.data_ptr()) != target.data_ptr()):
                    return None  # aliased in one search and not in the other
        for target, source in pairs.values():
            if target.data_ptr() != source.data_ptr():  # (the model's own weights are read in place)
                target.copy_(source)
        self.searches.move_to_end(key)
        return kept

    def keep(self, key: Optional[Hashable], leaves: Optional[List[object]], search) -> None:
        if key is None:
            return
        self.searches[key] = (leaves, search)
        while len(self.searches) > self.size:
            self.searches.popitem(last=False)


class ReadLengthSteps:
    """A search's step, one runner (``make(step)``: captured, compiled, or as it is) for each
    length of the self-attention caches it reads: the step that decodes position p reads the
    first ``bucket`` * ceil((p + 1) / ``bucket``) positions, at most ``positions`` (all the
    search decodes), so that an early step of a long summary does not read the whole cache.
    Each length's runner is made the first time a step needs it; ``bucket`` None: one runner,
    reading the whole cache."""

    def __init__(self, step: Callable[[], None], make: Callable[[Callable[[], None]], Callable[[], None]],
                 model: torch.nn.Module, positions: int, bucket: Optional[int]):
        self.step, self.make, self.model = step, make, model
        self.positions, self.bucket = positions, bucket
        self.runners: Dict[Optional[int], Callable[[], None]] = {}
        # one of the model's decoder self-attentions: the read length it holds, all of them hold
        self.attention = next((m for m in model.modules() if isinstance(m, DecoderSelfAttention)), None)

    def read_length(self, position: int) -> Optional[int]:
        if self.bucket is None:
            return None
        return min(self.bucket * math.ceil((position + 1) / self.bucket), self.positions)

    def __call__(self, position: int) -> None:
        length = self.read_length(position)
        if self.attention is not None and self.attention.read_length != length:
            set_read_length(self.model, length)  # read by the steps run op by op, and by the captures
        if length not in self.runners:
            self.runners[length] = self.make(self.step)
        self.runners[length]()


class CapturedStep:
    """``step`` run once as it is (which also warms up the libraries it calls), then captured as
    a CUDA graph and replayed at every later call. Where capturing fails, it says why in one
    line and runs ``step`` op by op from then on. ``pool``: a memory pool shared with other
    captures (``torch.cuda.graph_pool_handle``), else one of its own."""

    def __init__(self, step: Callable[[], None], pool=None):
        self.step, self.pool = step, pool
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.calls = 0
        self.failed = False

    def __call__(self) -> None:
        self.calls += 1
        if self.graph is not None:
            self.graph.replay()
            return
        if self.failed:
            self.step()
            return
        if self.calls == 1:  # the warm-up runs on a side stream, as capturing asks
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.step()
            torch.cuda.current_stream().wait_stream(side)
            return
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.pool):  # records the step without running it
                self.step()
        except RuntimeError as error:
            logger.warning("decoding steps run op by op: capturing one as a CUDA graph failed (%s)",
                           str(error).splitlines()[0])
            self.failed = True
            self.step()
            return
        self.graph = graph
        graph.replay()


def ban_repeated_ngrams_at(tokens: Tensor, position: Tensor, lprobs: Tensor, n: int) -> Tensor:
    """``ngram_blocking.ban_repeated_ngrams`` of the history ``tokens[:, : position + 1]``, over the
    whole buffer (R, L) with windows past the history masked: the same bans, fixed shapes."""
    rows, length = tokens.shape
    if n < 1 or length < n:
        return lprobs
    if n == 1:
        seen = torch.arange(length, device=tokens.device) <= position  # (L,)
        hits = torch.zeros_like(lprobs).scatter_add_(1, tokens, seen.to(lprobs.dtype).expand(rows, -1))
        return lprobs.masked_fill_(hits > 0, -math.inf)
    windows = tokens.unfold(1, n - 1, 1)[:, : length - n + 1]  # (R, L-n+1, n-1)
    # the last n-1 tokens of the history, which the next token would extend
    last = position - (n - 2) + torch.arange(n - 1, device=tokens.device)  # (n-1,)
    suffix = tokens.index_select(1, last.clamp(min=0))  # (R, n-1)
    matches = (windows == suffix.unsqueeze(1)).all(dim=-1)  # (R, L-n+1)
    # a window counts if the token that follows it is in the history (and the suffix is whole)
    starts = torch.arange(length - n + 1, device=tokens.device)
    matches &= (starts + n - 1 <= position) & (position >= n - 2)
    followers = tokens[:, n - 1:]  # (R, L-n+1)
    hits = torch.zeros_like(lprobs).scatter_add_(1, followers, matches.to(lprobs.dtype))
    return lprobs.masked_fill_(hits > 0, -math.inf)
