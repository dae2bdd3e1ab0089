"""The search's step loop, waiting for the device once a step.

``SearchLoop`` is a fairseq ``SequenceGenerator`` whose search loop is its own: the same
search as ``SequenceGenerator._generate`` (the same hypotheses, scores, positional scores
and attention, tested against it), made of fairseq's building blocks (the ensemble's encoder,
decoder and reordering, the search strategy's ``step`` and its constraint hooks,
``_prefix_tokens``, the n-gram blocker, ``finalize_hypos``), and arranged so that a step
makes the host wait for the device only where the search needs an answer on the host:

* which hypotheses ended at this step (one ``nonzero`` of the ended mask, every step);
* when some did, fairseq's ``finalize_hypos``, which stores them on the host, and dropping
  the examples that are done;
* at the steps that force a prefix (the summary's ``<s>``), fairseq's ``_prefix_tokens``.

Everything else is written so that it does not wait: NaN scores become -inf through a
masked fill, hypotheses that ended earlier are masked with a logical and, and the sanity
check that every example still has a live hypothesis (true by construction) is not read
back. Everything a user can reach through fairseq's loop is supported: beam search,
``--sampling`` (top-k, top-p), ``--diverse-beam-groups``, ``--diversity-rate``,
``--match-source-len``, ``--prefix-size`` and prefix-constrained search, lexical
``--constraints``, LM fusion (``lm_model``, ``--lm-weight``), ensembles, ``--min-len``,
``--max-len-a/b``, ``--unkpen``, ``--lenpen``, ``--unnormalized``, ``--temperature``,
``tokens_to_suppress`` and attention for ``--print-alignment``; nothing falls back to
fairseq's loop.

With ``patient`` set, beam search stops an example as transformers' ``generate`` does with
``early_stopping=False`` (``Patience``), the rule of the PageSum authors' test decoding, instead
of fairseq's first ``beam`` ended hypotheses.

The tests and benchmarks run fairseq's own loop in the same generator to compare
(``benchmarks/reference/search.py``).
"""

import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from fairseq.sequence_generator import SequenceGenerator
from torch import Tensor

from ..errors import SettingError
from ..modules.decoding_step import declare_unpadded_prefixes

Hypotheses = List[List[Dict[str, Tensor]]]  # per example, its finished hypotheses


@dataclass
class Beams:
    """What the search holds for the hypotheses it is extending: ``examples`` still searched,
    ``beam`` hypotheses each, one row per hypothesis (rows = examples * beam)."""

    tokens: Tensor  # (rows, max_len + 2): the start token, one token per step, padding after
    scores: Tensor  # (rows, max_len + 1): cumulative log-probability after each step
    attention: Optional[Tensor]  # (rows, sources, max_len + 2), once the decoder has reported one
    ignored: Tensor  # (examples, beam) bool: hypotheses that ended and are no longer extended
    offsets: Tensor  # (examples, 1): each example's first row
    ids: Tensor  # (examples,): each example's id in the sample (prefix-constrained search reads it)
    src_lengths: Tensor  # (examples,) source lengths (--match-source-len)
    prefix_tokens: Optional[Tensor]  # (examples, prefix_len) tokens forced first

    def select(self, keep: Tensor) -> "Beams":
        """The beams of the examples ``keep`` (kept,), in that order."""
        kept = keep.numel()

        def rows(t: Tensor) -> Tensor:  # (examples * beam, ...) -> (kept * beam, ...)
            return t.view(self.ignored.size(0), -1)[keep].view(kept * self.ignored.size(1), *t.shape[1:])

        return Beams(tokens=rows(self.tokens), scores=rows(self.scores),
                     attention=None if self.attention is None else rows(self.attention),
                     ignored=self.ignored[keep], offsets=self.offsets[:kept], ids=self.ids[keep],
                     src_lengths=self.src_lengths[keep],
                     prefix_tokens=None if self.prefix_tokens is None else self.prefix_tokens[keep])


@dataclass
class Candidates:
    """The search strategy's proposals for one step, best first: (examples, cands) each."""

    scores: Tensor  # cumulative log-probability of the extended hypothesis
    tokens: Tensor  # the token it adds
    beams: Tensor  # the beam (within its example) it extends

    def select(self, keep: Tensor) -> "Candidates":
        return Candidates(self.scores[keep], self.tokens[keep], self.beams[keep])


class Patience:
    """An example's stop as transformers 4.6's beam search with ``early_stopping=False`` decides it,
    which the PageSum authors decoded their test sets with: the example keeps its ``beam`` best ended
    hypotheses, a later one replacing the worst kept when it scores higher, and is done once that
    worst scores at least the step's best candidate, ended or not, normalised by the step's length
    (``(step + 1) ** len_penalty``, the length an ended hypothesis of the step is normalised by)."""

    def __init__(self, beam: int, len_penalty: float):
        self.beam, self.len_penalty = beam, len_penalty
        self.scores: Dict[int, List[float]] = {}  # by example of the sample: the kept hypotheses' scores

    def keep(self, ended: Hypotheses, finalized: Hypotheses) -> None:
        """Move the hypotheses that ended at this step (``ended``, by example) into ``finalized``."""
        new = [(example, hypo) for example, hypos in enumerate(ended) for hypo in hypos]
        if not new:
            return
        values = torch.stack([hypo["score"] for _, hypo in new]).tolist()  # read back at once
        for (example, hypo), score in zip(new, values):
            kept, scores = finalized[example], self.scores.setdefault(example, [])
            if len(kept) < self.beam or score > min(scores):
                kept.append(hypo)
                scores.append(score)
                if len(kept) > self.beam:  # the worst goes, the first kept of equal ones
                    worst = scores.index(min(scores))
                    del kept[worst], scores[worst]

    def done(self, candidate_scores: Tensor, step: int, live: List[int], finished: List[bool]) -> List[int]:
        """The examples of the batch (indices into ``live``, the sample's examples still searched)
        that are done at ``step``, marked in ``finished``; ``candidate_scores`` (examples, cands)."""
        full = [i for i, example in enumerate(live)
                if not finished[example] and len(self.scores.get(example, ())) >= self.beam]
        if not full:
            return []
        best = candidate_scores[full].max(dim=1).values.tolist()  # (full,) read back at once
        done = [i for i, b in zip(full, best) if min(self.scores[live[i]]) >= b / (step + 1) ** self.len_penalty]
        for i in done:
            finished[live[i]] = True
        return done


class SearchLoop(SequenceGenerator):
    """fairseq's ``SequenceGenerator`` with its search loop replaced by ``_search``."""

    patient = False  # stop as transformers' early_stopping=False does (``Patience``), not at beam ended

    def _generate(self, sample: Dict[str, Dict[str, Tensor]], prefix_tokens: Optional[Tensor] = None,
                  constraints: Optional[Tensor] = None, bos_token: Optional[int] = None) -> Hypotheses:
        return self._search(sample, prefix_tokens, constraints, bos_token)

    def _search(self, sample: Dict[str, Dict[str, Tensor]], prefix_tokens: Optional[Tensor] = None,
                constraints: Optional[Tensor] = None, bos_token: Optional[int] = None) -> Hypotheses:
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]  # (examples, src_len) or (examples, pages, page_len)
        examples, beam = src_tokens.size(0), self.beam_size
        if constraints is not None and not self.search.supports_constraints:
            raise NotImplementedError("--constraints needs a search that supports them (the lexically constrained "
                                      "beam search that fairseq builds for --constraints)")
        self.search.init_constraints(constraints, beam)
        beams, max_len = self._start(sample, prefix_tokens, bos_token)
        start_order = torch.arange(examples, device=src_tokens.device)[:, None].expand(examples, beam).reshape(-1)
        encoder_outs = self.model.reorder_encoder_out(self.model.forward_encoder(net_input), start_order)
        states: List[Dict[str, Dict[str, Optional[Tensor]]]] = [{} for _ in range(self.model.models_size)]
        for state in states:
            declare_unpadded_prefixes(state)
        suppressed = None if self.token_indices_to_suppress is None else self.token_indices_to_suppress.to(
            src_tokens.device)  # moved once, so that no step copies it to the device
        finalized: Hypotheses = [[] for _ in range(examples)]
        finished = [False] * examples
        patience = Patience(beam, self.len_penalty if self.normalize_scores else 0.0) if self.patient else None
        remaining = examples
        order: Optional[Tensor] = None  # (rows,) the decoder state's row that each hypothesis continues
        for step in range(max_len + 1):  # the last step can only add </s>
            if order is not None:
                self.model.reorder_incremental_state(states, order)
                encoder_outs = self.model.reorder_encoder_out(encoder_outs, order)
            lprobs = self._next_log_probs(beams, step, max_len, encoder_outs, states, suppressed)  # (rows, vocab)
            candidates = self._candidates(beams, step, lprobs)
            ended = ended_candidates(candidates, self.eos)  # (examples, cands)
            done = self._finalize_ended(beams, candidates, ended, step, max_len, finalized, finished, patience)
            remaining -= len(done)
            if remaining == 0 or (self.search.stop_on_max_len and step >= max_len):
                break
            state_offsets = beams.offsets  # (examples, 1): where each example's rows are in the decoder state
            if done:  # drop the examples that are done; the decoder state drops them at the next reorder
                keep = torch.tensor(sorted(set(range(beams.ignored.size(0))) - set(done)), device=src_tokens.device)
                self.search.prune_sentences(keep)
                beams, candidates, ended = beams.select(keep), candidates.select(keep), ended[keep]
                state_offsets = keep[:, None] * beam
            chosen = self._extend(beams, candidates, ended, step)  # (examples, beam)
            order = (chosen + state_offsets).view(-1)
        return best_first(finalized)

    def _start(self, sample, prefix_tokens: Optional[Tensor], bos_token: Optional[int]):
        """(the empty beams of every example, the search's maximum length in steps)."""
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]
        src_lengths = net_input.get("src_lengths")
        if src_lengths is None:  # tokens that are neither </s> nor padding, as fairseq counts them
            src_lengths = (src_tokens.ne(self.eos) & src_tokens.ne(self.pad)).long().sum(dim=1)
        if self.match_source_len:
            max_len = int(src_lengths.max())
        else:
            max_len = min(int(self.max_len_a * src_tokens.size(1) + self.max_len_b), self.max_len - 1)
        if self.min_len > max_len:
            raise SettingError(f"the search's minimum length ({self.min_len} steps) is above its maximum ({max_len}): "
                               "lower --min-len or raise --max-len-a/--max-len-b")
        examples, beam, device = src_tokens.size(0), self.beam_size, src_tokens.device
        tokens = torch.full((examples * beam, max_len + 2), self.pad, dtype=torch.long, device=device)
        tokens[:, 0] = self.eos if bos_token is None else bos_token
        ids = sample.get("id")
        beams = Beams(
            tokens=tokens,
            scores=torch.zeros(examples * beam, max_len + 1, device=device),
            attention=None,
            ignored=torch.zeros(examples, beam, dtype=torch.bool, device=device),
            offsets=torch.arange(examples, device=device)[:, None] * beam,
            ids=ids if isinstance(ids, Tensor) else torch.arange(examples, device=device),
            src_lengths=src_lengths,
            prefix_tokens=prefix_tokens,
        )
        return beams, max_len

    def _next_log_probs(self, beams: Beams, step: int, max_len: int, encoder_outs, states,
                        suppressed: Optional[Tensor]) -> Tensor:
        """The decoder's log-probabilities (rows, vocab) of every hypothesis's next token, with the
        search's rules applied; records the decoder's attention in ``beams``."""
        history = beams.tokens[:, : step + 1]  # (rows, step + 1)
        lprobs, attention = self.model.forward_decoder(history, encoder_outs, states, self.temperature)
        if self.lm_model is not None:  # shallow fusion with a language model over the summary so far
            lm_lprobs = self.lm_model.get_normalized_probs(self.lm_model(history), log_probs=True, sample=None)
            lprobs += lm_lprobs[:, -1, :] * self.lm_weight
        lprobs.masked_fill_(torch.isnan(lprobs), -math.inf)
        lprobs[:, self.pad].fill_(-math.inf)
        if self.unk_penalty:  # (4 operators a step for nothing at fairseq's default, 0)
            lprobs[:, self.unk] -= self.unk_penalty
        if step >= max_len:  # only </s> may come
            lprobs[:, : self.eos] = -math.inf
            lprobs[:, self.eos + 1 :] = -math.inf
        prefix = beams.prefix_tokens
        if prefix is not None and step < prefix.size(1) and step < max_len:
            lprobs, beams.tokens, beams.scores = self._prefix_tokens(step, lprobs, beams.scores, beams.tokens,
                                                                     prefix, self.beam_size)
        else:  # the minimum length and the suppressed tokens apply once the prefix is written
            if step < self.min_len:
                lprobs[:, self.eos].fill_(-math.inf)
            if suppressed is not None:
                lprobs.index_fill_(1, suppressed, -math.inf)
        if attention is not None:  # (rows, sources)
            if beams.attention is None:
                beams.attention = beams.scores.new_empty(beams.tokens.size(0), attention.size(1),
                                                         beams.tokens.size(1))
            beams.attention[:, :, step + 1].copy_(attention)
        return lprobs

    def _candidates(self, beams: Beams, step: int, lprobs: Tensor) -> Candidates:
        """The search strategy's candidates for extending every example's beams."""
        examples, beam = beams.ignored.shape
        beams.scores = beams.scores.type_as(lprobs)
        if self.should_set_src_lengths:
            self.search.set_src_lengths(beams.src_lengths)
        if self.repeat_ngram_blocker is not None:
            lprobs = self.repeat_ngram_blocker(beams.tokens, lprobs, examples, beam, step)
        scores, tokens, chosen_beams = self.search.step(
            step,
            lprobs.view(examples, -1, self.vocab_size),  # (examples, beam, vocab)
            beams.scores.view(examples, beam, -1)[:, :, :step],  # (examples, beam, step)
            beams.tokens[:, : step + 1],
            beams.ids,
        )
        return Candidates(scores, tokens, chosen_beams)

    def _finalize_ended(self, beams: Beams, candidates: Candidates, ended: Tensor, step: int, max_len: int,
                        finalized: Hypotheses, finished: List[bool], patience: Optional[Patience] = None) -> List[int]:
        """Finish the hypotheses that end with </s> among each example's ``beam`` best candidates
        (the step's one read-back; ``ended``: ``ended_candidates``), and return the examples that
        are now done (``patience``: as it decides, reading back the step's best candidates too)."""
        beam = self.beam_size
        ended = ended[:, :beam] & ~beams.ignored  # (examples, beam)
        example, rank = ended.nonzero(as_tuple=True)  # the host learns which hypotheses ended
        # the batch's examples, in the sample, before this step finishes any (a patient search's)
        live = [] if patience is None else [i for i, already in enumerate(finished) if not already]
        done: List[int] = []
        if example.numel():
            rows = candidates.beams[example, rank] + beams.offsets[example, 0]  # (ended,) the rows they extend
            into = finalized if patience is None else [[] for _ in finalized]
            done = self.finalize_hypos(step, rows, candidates.scores[example, rank], beams.tokens, beams.scores,
                                       into, finished, beam, beams.attention, beams.src_lengths, max_len)
            if patience is not None:
                patience.keep(into, finalized)
        if patience is not None:
            done = sorted(done + patience.done(candidates.scores, step, live, finished))
        return done

    def is_finished(self, step: int, unfin_idx: int, max_len: int, finalized_sent_len: int, beam_size: int) -> bool:
        """fairseq's rule; a patient search finishes an example only at the maximum length here (else
        ``Patience.done``)."""
        return step == max_len if self.patient else super().is_finished(step, unfin_idx, max_len,
                                                                        finalized_sent_len, beam_size)

    def _extend(self, beams: Beams, candidates: Candidates, ended: Tensor, step: int) -> Tensor:
        """Continue every example with its ``beam`` best candidates that did not end (``ended``;
        ended ones only where fewer are left: they are then ignored from now on), writing their
        token and score at ``step`` in ``beams``. Returns the beam (examples, beam) each one
        extends."""
        examples, beam = beams.ignored.shape
        width = candidates.tokens.size(1)
        unavailable = ended | F.pad(beams.ignored, (0, width - beam))  # (examples, cands)
        # the available candidates first, then the others, each in the search's order
        rank = torch.add(torch.arange(width, device=unavailable.device), unavailable, alpha=width)
        ranks, picked = rank.topk(beam, dim=1, largest=False)  # (examples, beam)
        beams.ignored = ranks >= width
        chosen = candidates.beams.gather(1, picked)  # (examples, beam)
        rows = (chosen + beams.offsets).view(-1)  # (examples * beam,)
        # whole rows, one operator each (the positions after the step are padding, or zeros, in every row)
        beams.tokens = beams.tokens.index_select(0, rows)
        beams.tokens.view(examples, beam, -1)[:, :, step + 1] = candidates.tokens.gather(1, picked)
        beams.scores = beams.scores.index_select(0, rows)
        beams.scores.view(examples, beam, -1)[:, :, step] = candidates.scores.gather(1, picked)
        self.search.update_constraints(picked)
        if beams.attention is not None:
            beams.attention = beams.attention.index_select(0, rows)
        return chosen


def ended_candidates(candidates: Candidates, eos: int) -> Tensor:
    """(examples, cands) bool: the candidates that end their hypothesis with a finite score."""
    return candidates.tokens.eq(eos) & candidates.scores.ne(-math.inf)


def best_first(finalized: Hypotheses) -> Hypotheses:
    """Every example's finished hypotheses, highest score first (their scores read back at once)."""
    every = [hypo["score"] for hypos in finalized for hypo in hypos]
    scores = iter(torch.stack(every).tolist() if every else [])
    ordered = []
    for hypos in finalized:
        order = torch.tensor([next(scores) for _ in hypos]).sort(descending=True).indices  # (hypotheses,)
        ordered.append([hypos[i] for i in order.tolist()])
    return ordered
