"""Segment-by-segment beam search for AWESOME.

The segments of a batch are decoded in order. For segment t, every document that has a
segment t gets a beam search of its own summary of it: the page generator's search
(forced <s>, lengths in summary tokens, n-gram blocking; see
``generation/page_sequence_generator.py``) with the memories as they stand after the
earlier segments. The best hypothesis of each document then runs once through the model,
teacher-forced, which writes the segment and that *generated* summary into the memories
for segment t+1, exactly as the reference summary does in training.

The summary of a document is the concatenation of its segments' best summaries, one
hypothesis: ``<s>`` + every segment's summary + ``</s>``; a segment whose summary is
empty adds nothing. The model learned every segment's summary with a leading space
(``awesome.targets.segment_summary_ids``), so the joined ids decode, with the codec
every output path uses (``fairseq-generate``'s hypotheses, validation ROUGE,
``summarize()``), as the segments' texts joined by single spaces. Its positional scores are those of the tokens kept, and its score
is their sum divided by length ** lenpen, which for a one-segment document is exactly
the search's own score. A one-segment document keeps the search's n-best list.
"""

from typing import Dict, List, Optional

import torch
from torch import Tensor

from ...generation.page_sequence_generator import PageSumSequenceGenerator
from .memory import SegmentMemory
from ...modules.page_mixing import real_pages


class SegmentSequenceGenerator(PageSumSequenceGenerator):
    @torch.no_grad()
    def _generate(self, sample: Dict[str, Dict[str, Tensor]], prefix_tokens: Optional[Tensor] = None,
                  constraints: Optional[Tensor] = None, bos_token: Optional[int] = None):
        if len(self.model.models) != 1:
            raise ValueError("segment-by-segment decoding runs one model, not an ensemble")
        if prefix_tokens is not None or constraints is not None:
            raise ValueError("segment-by-segment decoding takes no prefix or constraints")
        model = self.model.single_model
        src_tokens = sample["net_input"]["src_tokens"]  # (batch, max_segments, seg_len)
        segment_counts = real_pages(src_tokens, self.pad).sum(dim=1)  # (batch,)
        memory = SegmentMemory()
        summaries: List[List[List[Dict]]] = [[] for _ in range(src_tokens.size(0))]
        active = torch.arange(src_tokens.size(0), device=src_tokens.device)
        for t in range(int(segment_counts.max())):
            still = segment_counts.index_select(0, active) > t  # (rows,) of the rows active so far
            if not bool(still.all()):
                memory.select(still.nonzero(as_tuple=True)[0])
                active = active[still]
            segment = src_tokens[active, t]  # (rows, seg_len)
            segment = segment[:, : int(segment.ne(self.pad).sum(dim=1).max())]
            hypos = self._search_segment(model, segment, memory)
            self._write_memory(model, segment, [h[0] for h in hypos], memory)
            for row, example in enumerate(active.tolist()):
                summaries[example].append(hypos[row])
        return [parts[0] if len(parts) == 1 else [self._join([h[0] for h in parts])] for parts in summaries]

    def _search_segment(self, model, segment: Tensor, memory: SegmentMemory) -> List[List[Dict]]:
        """Beam search of one segment per row, reading the memories as they stand."""
        encoder_memory, decoder_memory = model.read_memory(memory, segment.size(0))
        step = {"net_input": {
            "src_tokens": segment.unsqueeze(1),  # (rows, 1, seg_len): one page per row
            "src_lengths": segment.ne(self.pad).sum(dim=1),
            "encoder_memory": encoder_memory,
            "decoder_memory": decoder_memory,
        }}
        return super()._generate(step)

    def _write_memory(self, model, segment: Tensor, best: List[Dict], memory: SegmentMemory) -> None:
        """Run the best summaries through the model, teacher-forced, so that the segment and
        what was generated for it are written into the memories."""
        if not memory.started and not (model.encoder.memories or model.decoder.memories):
            return  # a model without memories carries nothing
        tokens = [h["tokens"] for h in best]  # each <s> ... </s>
        width = max(len(t) for t in tokens)
        prev = segment.new_full((len(tokens), width), self.pad)  # (rows, tgt_len): </s> <s> ...
        for row, t in enumerate(tokens):
            prev[row, : len(t)] = torch.cat([t.new_tensor([self.eos]), t[:-1]])
        model(segment, None, prev, memory=memory)

    def _join(self, parts: List[Dict]) -> Dict:
        """One document hypothesis from its segments' best hypotheses (see the module docstring)."""
        tokens, scores = [parts[0]["tokens"][:1]], [parts[0]["positional_scores"][:1]]  # the forced <s>
        for hypo in parts:
            tokens.append(hypo["tokens"][1:-1])
            scores.append(hypo["positional_scores"][1:-1])
        tokens.append(parts[-1]["tokens"][-1:])  # </s>
        scores.append(parts[-1]["positional_scores"][-1:])
        tokens, positional = torch.cat(tokens), torch.cat(scores)
        return {
            "tokens": tokens,
            "score": positional.sum() / len(tokens) ** self.len_penalty,
            "positional_scores": positional,
            "attention": None,
            "alignment": torch.empty(0),
            "page_weights": None,
            "segments": [hypo["tokens"] for hypo in parts],
        }
