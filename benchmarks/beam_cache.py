"""Beam search's decoding state: pages shared by the beams against one copy per beam, and
the self-attention cache over a long summary.

Sharing. In beam search, each page's encoder output and cross-attention keys and values
are the same for every beam of an example. ``PageSumModel.set_beam_size(beam)`` (what the
generator calls) stores them once per example; ``set_beam_size(beam, share_pages=False)``
stores one copy per beam and reorders it with the beams, the layout of a model without
that hook. For every (pages, beam) of the grid and both layouts the script reports

* ``state MB``: the tensors beam search holds from its first step to its last, measured
  after that first step exactly as the generator makes it (encoder, encoder reordering,
  one decoder step): the encoder output plus the cross-attention keys and values
  (``pages MB``), and the self-attention states, which grow by one position per step;
* ``peak MB``: the peak tensor memory that a whole ``generate`` call (``--steps`` tokens)
  adds to the weights (CUDA: ``max_memory_allocated``; CPU: every storage an operator
  creates, counted until it is freed; torch's ``MemTracker`` refuses a module called once
  per step);
* ``ms/step``: the time of one decoding step of a search of ``--steps`` tokens (summary
  lengths forced with min = max length): the median interval between the generator's
  successive decoder calls, so everything done per step counts (the decoder, reordering
  the cached states and the encoder output, fairseq's beam bookkeeping) and the encoder
  pass does not; best of ``--repeats`` searches.

Self-attention cache. The decoder's self-attention keeps keys and values for every page
row and grows them by one position per step. fairseq's attention grows them by
concatenation (a fresh copy of the whole cache) after beam search has reordered them (a
second fresh copy); PageSum's decoder self-attention (``modules/decoder_self_attention.py``)
writes each new position in place into a cache preallocated to the search's length and
reorders beams through a beam table (``benchmarks/fused_decoding.py`` compares it with the
one-copy cache it replaced). Two copies of one model, the
same weights, one with each attention, decode a ``--long``-token summary in lockstep, driven
as beam search drives a decoder: at every step the beams are reordered (each continues a
random beam of its example) and extended by one token, and the two models take turns, so
that a busy spell of the machine hits both. The script reports around a few steps the
time of a step (the reordering call plus the decoder call) and the cache's size, and the
sum over all steps; the two models' outputs are checked equal at every step.

Weights are random: with forced summary lengths, cost does not depend on them. Sizes: on
CPU ``bart.base`` dimensions (6+6 layers, d=768, 12 heads, GPT-2 vocabulary) in fp32; on
CUDA ``bart.large`` dimensions in bf16.

    python -m benchmarks.beam_cache --device cpu
"""

import argparse
import copy
import statistics
import sys
import time
import weakref
from typing import Callable, Dict, List

import torch
from fairseq.modules import MultiheadAttention
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from benchmarks.common import (
    BART_BASE,
    BART_LARGE,
    ModelSize,
    add_device_args,
    build_model,
    describe_device,
    dtype_name,
    markdown_table,
    paged_source,
    peak_step_bytes,
    random_words,
    start,
)
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_recipes.profiling import synchronize

MB = 2**20


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--pages", type=int, nargs="+", help="page counts (default: 2 8; --quick: 2 4)")
    parser.add_argument("--beams", type=int, nargs="+", help="beam sizes (default: 4 8; --quick: 4)")
    parser.add_argument("--page-len", type=int, help="tokens per page (default: 512 on CPU, 1024 on CUDA)")
    parser.add_argument("--batch", type=int, help="documents per batch (default: 1 on CPU, 4 on CUDA)")
    parser.add_argument("--steps", type=int, help="summary tokens of the timed searches (default: 16, --quick: 4)")
    parser.add_argument("--long", type=int, help="summary tokens of the cache-growth search (default: 900)")
    parser.add_argument("--long-pages", type=int, default=4, help="pages of the cache-growth search")
    parser.add_argument("--long-beam", type=int, default=4, help="beam of the cache-growth search")
    parser.add_argument("--repeats", type=int, help="timed runs per configuration (default: 2, --quick: 1)")
    args = parser.parse_args(argv)
    on_cuda = args.device == "cuda"
    args.pages = args.pages or ([2, 4] if args.quick else [2, 8])
    args.beams = args.beams or ([4] if args.quick else [4, 8])
    args.page_len = args.page_len or (1024 if on_cuda else (128 if args.quick else 512))
    args.batch = args.batch or (4 if on_cuda else 1)
    args.steps = args.steps or (4 if args.quick else 16)
    args.long = args.long or (60 if args.quick else 900)
    args.repeats = args.repeats or (1 if args.quick else 2)
    return args


class LiveStorages(TorchDispatchMode):
    """Sums the bytes of the storages that operators create, from their creation until they
    are freed, and keeps the peak of that sum."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self.refs: Dict[int, weakref.ref] = {}

    def _free(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self.refs.pop(key, None)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {t.untyped_storage()._cdata for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                key = storage._cdata
                if key not in self.refs and key not in inputs:  # new: not a view, not written in place
                    nbytes = storage.nbytes()
                    self.live += nbytes
                    self.peak = max(self.peak, self.live)
                    self.refs[key] = weakref.ref(storage, lambda _, k=key, n=nbytes: self._free(k, n))
        return out


def peak_bytes(fn: Callable[[], object], device: torch.device) -> int:
    if device.type == "cuda":
        return peak_step_bytes(fn, device, [])
    with LiveStorages() as tracker:
        fn()
    return tracker.peak


def generator_for(model, dictionary, beam: int, length: int, shared: bool, **options) -> PageSumSequenceGenerator:
    """Beam search of summaries of exactly ``length`` tokens, pages shared by the beams or one
    copy per beam; ``options`` (``min_len``, ``len_penalty``, ``no_repeat_ngram_size``,
    ``top_pages``, ``decoding``, ...) go to the generator, ``length`` staying the maximum. The
    steps run as the step loop unless ``decoding`` says otherwise: the benchmarks time decoder
    calls, which a captured step makes only when it is captured."""
    settings = {"max_len_a": 0, "max_len_b": length, "min_len": length, "decoding": "eager", **options}
    generator = PageSumSequenceGenerator([model], dictionary, beam_size=beam, **settings)
    model.set_beam_size(beam, share_pages=shared)  # after the generator, which sets the shared default
    return generator


def tensor_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a view of another counts once)."""
    storages = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            storage = t.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def first_step_state(model, sample, beam: int) -> Dict[str, int]:
    """What beam search holds after its first step, in bytes, split into the pages (encoder
    output and cross-attention keys and values) and the self-attention states."""
    src_tokens = sample["net_input"]["src_tokens"]
    batch = src_tokens.size(0)
    with torch.no_grad():
        encoder_out = model.encoder.forward_torchscript(sample["net_input"])
        new_order = torch.arange(batch, device=src_tokens.device).repeat_interleave(beam)
        encoder_out = model.encoder.reorder_encoder_out(encoder_out, new_order)
        prefix = src_tokens.new_full((batch * beam, 1), model.decoder.dictionary.eos())
        state: Dict = {}
        model.decoder(prefix, encoder_out=encoder_out, incremental_state=state)
    pages = [t for values in encoder_out.values() for t in values]
    own = []
    for layer in model.decoder.layers:
        pages += list(layer.encoder_attn._get_input_buffer(state).values())
        own += list(layer.self_attn._get_input_buffer(state).values())
    return {"pages": tensor_bytes(pages), "self": tensor_bytes(own)}


class DecoderCalls:
    """Records when each of the generator's decoder calls starts: from one to the next is one
    whole step of the search."""

    def __init__(self, model, device):
        self.decoder, self.device = model.decoder, device
        self.starts: List[float] = []

    def __enter__(self):
        forward = self.decoder.forward

        def timed(*args, **kwargs):
            synchronize(self.device)
            self.starts.append(time.perf_counter())
            return forward(*args, **kwargs)

        self.decoder.forward = timed
        return self

    def __exit__(self, *exc):
        del self.decoder.forward

    def step_seconds(self) -> List[float]:
        return [b - a for a, b in zip(self.starts, self.starts[1:])]


def step_seconds(model, dictionary, sample, beam: int, shared: bool, args, device) -> float:
    """Median seconds between successive decoder calls of one search, best of ``repeats``."""
    generator = generator_for(model, dictionary, beam, args.steps, shared)
    best = float("inf")
    for _ in range(args.repeats):
        with DecoderCalls(model, device) as calls:
            hypos = generator.generate([model], sample)
        assert {len(h[0]["tokens"]) for h in hypos} == {args.steps + 2}, "<s>, the forced length, </s>"
        best = min(best, statistics.median(calls.step_seconds()))
    return best


def sharing_rows(model, dictionary, args, device) -> List[List[object]]:
    rng = torch.Generator().manual_seed(args.seed)
    rows = []
    for n_pages in args.pages:
        src_tokens = paged_source(dictionary, args.batch, n_pages, args.page_len, rng).to(device)
        sample = {"net_input": {"src_tokens": src_tokens}}
        for beam in args.beams:
            measured = {}
            for shared in (False, True):
                generator = generator_for(model, dictionary, beam, args.steps, shared)
                state = first_step_state(model, sample, beam)
                peak = peak_bytes(lambda: generator.generate([model], sample), device)
                seconds = step_seconds(model, dictionary, sample, beam, shared, args, device)
                measured[shared] = (state, peak, seconds)
                layout = "shared" if shared else "per beam"
                rows.append([
                    n_pages, beam, layout, f"{state['pages'] / MB:.0f}", f"{state['self'] / MB:.1f}",
                    f"{(state['pages'] + state['self']) / MB:.0f}", f"{peak / MB:.0f}", f"{seconds * 1e3:.0f}",
                ])
                print(f"pages={n_pages} beam={beam} {layout} done", file=sys.stderr, flush=True)
            (s0, p0, t0), (s1, p1, t1) = measured[False], measured[True]
            total0, total1 = s0["pages"] + s0["self"], s1["pages"] + s1["self"]
            rows.append([n_pages, beam, "per beam / shared", f"{s0['pages'] / s1['pages']:.2f}x", "",
                         f"{total0 / total1:.2f}x", f"{p0 / p1:.2f}x", f"{t0 / t1:.2f}x"])
    return rows


def with_fairseqs_self_attention(model):
    """A copy of ``model`` whose decoder self-attention is fairseq's own module, same weights."""
    twin = copy.deepcopy(model)
    for layer in twin.decoder.layers:
        ours = layer.self_attn
        stock = MultiheadAttention(ours.embed_dim, ours.num_heads, dropout=ours.dropout_module.p, self_attention=True)
        stock.load_state_dict(ours.state_dict())
        layer.self_attn = stock.to(device=ours.k_proj.weight.device, dtype=ours.k_proj.weight.dtype)
    return twin.eval()


def cache_growth_rows(model, dictionary, size: ModelSize, dtype, args, device):
    rng = torch.Generator().manual_seed(args.seed + 1)
    src_tokens = paged_source(dictionary, 1, args.long_pages, args.page_len, rng).to(device)
    beam, page_rows = args.long_beam, args.long_pages * args.long_beam
    models = {"fairseq": with_fairseqs_self_attention(model), "pagesum": model}
    times: Dict[str, List[float]] = {name: [] for name in models}
    with torch.no_grad():
        encoder_outs = {}
        for name, candidate in models.items():
            candidate.set_beam_size(beam)
            encoder_outs[name] = candidate.encoder(src_tokens)
        states: Dict[str, Dict] = {name: {} for name in models}
        tokens = src_tokens.new_full((beam, 1), dictionary.eos())  # (beam, step + 1)
        for step in range(args.long):
            order = None
            if step > 0:
                order = torch.randint(beam, (beam,), generator=rng).to(device)  # each beam continues a random one
                words = random_words(dictionary, (beam, 1), rng).to(device)
                tokens = torch.cat([tokens.index_select(0, order), words], dim=1)
            outputs = []
            for name in sorted(models, reverse=step % 2 == 1):  # taking turns
                candidate, state = models[name], states[name]
                synchronize(device)
                start = time.perf_counter()
                if order is not None:
                    candidate.decoder.reorder_incremental_state_scripting(state, order)
                logits, _ = candidate.decoder(tokens, encoder_out=encoder_outs[name], incremental_state=state)
                synchronize(device)
                times[name].append(time.perf_counter() - start)
                outputs.append(logits)
            torch.testing.assert_close(outputs[0], outputs[1], atol=1e-5, rtol=0)
    print("cache growth done", file=sys.stderr, flush=True)

    bytes_per_position = 2 * size.layers * page_rows * size.embed_dim * torch.finfo(dtype).bits // 8
    before, after = times["fairseq"], times["pagesum"]
    rows = []
    for step in sorted({1, args.long // 9, args.long // 3, 2 * args.long // 3, args.long - 6} - {0}):
        window = slice(max(0, step - 5), step + 5)
        b, a = statistics.median(before[window]), statistics.median(after[window])
        rows.append([step, f"{(step + 1) * bytes_per_position / MB:.0f}", f"{b * 1e3:.0f}", f"{a * 1e3:.0f}",
                     f"{b / a:.2f}x"])
    rows.append([f"all {args.long}", f"{args.long * bytes_per_position / MB:.0f}", f"{sum(before):.1f} s",
                 f"{sum(after):.1f} s", f"{sum(before) / sum(after):.2f}x"])
    return rows, page_rows


def main(argv=None):
    args = parse_args(argv)
    device, dtype = start(args)
    size = BART_LARGE if device.type == "cuda" else BART_BASE
    torch.manual_seed(args.seed)
    max_positions = str(max(args.page_len, args.long + 2))
    task, model = build_model("pagesum_bart_large", size, "--max-source-positions", max_positions,
                              "--max-target-positions", max_positions, dropout=0.0)
    model.to(device=device, dtype=dtype).eval()
    dictionary = task.dictionary

    sharing = sharing_rows(model, dictionary, args, device)
    growth, page_rows = cache_growth_rows(model, dictionary, size, dtype, args, device)
    model.set_beam_size(1)

    setup = (
        f"Machine: {describe_device(device)}. Model: {size.layers}+{size.layers} layers, d={size.embed_dim}, "
        f"{size.heads} heads, vocab {len(dictionary)}, {dtype_name(dtype)}. "
        f"Batch {args.batch} document(s), pages of {args.page_len} tokens, searches of {args.steps} summary tokens; "
        f"ms/step: median step, best of {args.repeats} searches."
    )
    sharing_header = ["pages", "beam", "layout", "pages MB", "self-attn MB", "state MB", "peak MB", "ms/step"]
    growth_caption = (
        f"Self-attention cache over a {args.long}-token summary: 1 document, {args.long_pages} pages of "
        f"{args.page_len} tokens, beam {args.long_beam} ({page_rows} page rows), pages shared by the beams, "
        f"the two models in lockstep. Step: reordering plus decoder call, median of 10 steps around the step."
    )
    growth_header = ["step", "self-attn cache MB", "fairseq's attention ms", "PageSum's attention ms", "speed-up"]
    print("\n\n".join([setup, markdown_table(sharing_header, sharing),
                       growth_caption, markdown_table(growth_header, growth)]))


if __name__ == "__main__":
    main()
