"""Decoding at the memory-bandwidth bound: fused attention and a cache written once.

One run, three tables.

1. **One page**, ``bart.large`` dimensions on CUDA (``bart.base`` on the CPU), beam 4, a
   summary of ``--short`` tokens (lengths forced: min = max), batch 1: the time per summary
   of PageSum's generator with its steps captured as CUDA graphs (its default on CUDA; on the
   CPU the same fixed-shape steps run op by op), with its step loop, with fairseq's search
   loop instead of its own (``benchmarks/reference/search.py``), of fairseq's stock
   ``SequenceGenerator`` on the same BART (the same weights), and of ``transformers``'
   ``BartForConditionalGeneration.generate`` on the converted weights
   (``pagesum_plugin.checkpoints``: what ``pagesum-convert to-hf`` writes), and, where it is
   installed and runs on the device, CTranslate2's ``Translator.translate_batch`` on the same
   BART converted by its own fairseq converter (the source as fairseq reads it, ``<s>``
   forced first, as many summary tokens). The runs take
   turns for ``--repeats`` rounds: the best round of each, and the median over rounds of each
   round's ratio to fairseq (on a shared machine, the steadier of the two).

2. **7 pages x 512 tokens, beam 4, batch 1 and 8, caches of 256 and 900 positions**: a
   decoding step as beam search drives it (every beam continues a random beam of its
   example, then the decoder runs one position), with today's attention
   (``reference_attention``: fairseq's bmm + softmax, the self-attention cache written
   whole into a new buffer at every step) against the fused one (SDPA, the cache written
   in place and read through its beam table). The step at position L needs a cache of L
   positions; it is filled with random values instead of L real steps, which on 2 CPU cores
   would take hours. ``ms/step``: median of ``--steps`` steps, best of ``--repeats`` runs,
   old and new alternating. ``peak MB``: the search state the step holds (both caches) plus
   the most memory the step adds while it runs (every storage an operator creates, until
   freed; CUDA: the allocator's peak).
   These rows use ``--step-layers`` decoder layers (default 2) of ``bart.base`` width, so
   that batch 8 at 900 positions fits a shared machine: a step's cost is per layer.
   ``--system hed`` runs the same rows on HED (the pages are a cluster's documents), whose
   cross-attention is hierarchical (one SDPA attention per document, against the dense
   score matrix before).

3. **Bytes of one step**: what a step must read (``benchmarks/scale/costs.step_bytes``: the
   decoder weights, each page's cross-attention keys and values once, the self-attention
   cache once) against what its operators read and write (the sum, over every operator the
   step runs, of the bytes of its tensor arguments and results: an upper bound of the
   traffic, which counts a tensor once per operator that touches it).

``--quick`` is a smoke run of every code path (the GPU kit's rehearsal on the CPU): ``cpu_small``
widths, 2 + 2 layers, a page of 32 tokens, one round.

    python -m benchmarks.fused_decoding --device cpu
"""

import argparse
import contextlib
import copy
import os
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional

import torch
import transformers
from fairseq.models.bart import BARTModel
from fairseq.sequence_generator import SequenceGenerator
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

try:  # optional (setup.py's "bench" extra): a row of its own where it is installed
    import ctranslate2
    from ctranslate2.converters import FairseqConverter
except ImportError:
    ctranslate2 = None

from benchmarks.beam_cache import LiveStorages, tensor_bytes
from benchmarks.common import (
    BART_BASE,
    BART_LARGE,
    CPU_SMALL,
    ModelSize,
    add_device_args,
    build_model,
    describe_device,
    dtype_name,
    markdown_table,
    paged_source,
    random_words,
    start,
)
from benchmarks.scale.costs import decoder_weight_bytes, step_bytes
from pagesum_plugin.checkpoints.hf_config import bart_config_from_args
from pagesum_plugin.checkpoints.hf_weights import fairseq_state_to_hf
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from benchmarks.reference.search import fairseq_loop
from pagesum_plugin.systems.pagesum.model import CONFIDENCE_KEYS
from pagesum_plugin.modules.decoder_self_attention import DecoderSelfAttention, set_cache_length
from benchmarks.reference.modules import reference_attention
from pagesum_recipes.profiling import synchronize

MB = 2**20
STEP_ARCHS = {"pagesum": "pagesum_bart_large", "hed": "hed_bart_large"}  # sized by --step-layers and ModelSize
ONE_PAGE_GOAL = 2.0  # one page, batch 1: PageSum at least twice as fast as transformers' generate


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--short", type=int, default=128, help="summary tokens of the one-page rows (default: 128)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 900], help="cache lengths of the step rows")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8], help="batch sizes of the step rows")
    parser.add_argument("--pages", type=int, default=7)
    parser.add_argument("--page-len", type=int, default=512)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per run of the step rows (default: 6)")
    parser.add_argument("--step-layers", type=int, default=2, help="decoder layers of the step rows (default: 2)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--system", choices=tuple(STEP_ARCHS), default="pagesum",
                        help="the model of the step rows (default: pagesum)")
    parser.add_argument("--tables", nargs="+", choices=("one-page", "steps"), default=["one-page", "steps"],
                        help="which tables to run (default: both)")
    args = parser.parse_args(argv)
    if args.quick:
        args.short, args.lengths, args.batches, args.page_len, args.steps, args.repeats = 8, [16], [1], 32, 2, 1
    return args


# ---- 1. one page: PageSum, fairseq, transformers ------------------------------------------------


def one_page_rows(args, size: ModelSize, device, dtype) -> List[List[object]]:
    torch.manual_seed(args.seed)
    task, pagesum = build_model("pagesum_bart_large", size, dropout=0.0)
    dictionary = task.dictionary
    bart = BARTModel.build_model(pagesum.args, task)
    state = {k: v for k, v in pagesum.state_dict().items() if k not in CONFIDENCE_KEYS}
    bart.load_state_dict(state, strict=True)
    config = bart_config_from_args(pagesum.args, len(dictionary))
    hf = transformers.BartForConditionalGeneration(config)
    hf.load_state_dict(fairseq_state_to_hf(pagesum.state_dict())[0], strict=True)  # every weight, as pagesum-convert to-hf
    for model in (pagesum, bart, hf):
        model.to(device=device, dtype=dtype).eval()

    src = paged_source(dictionary, 1, 1, args.page_len, torch.Generator().manual_seed(args.seed)).to(device)
    length, beam = args.short, args.beam
    settings = dict(beam_size=beam, max_len_a=0, max_len_b=length, min_len=length)
    ours = PageSumSequenceGenerator([pagesum], dictionary, decoding="eager", **settings)
    # every step a replay of one captured CUDA graph; on the CPU the same fixed-shape steps, op by op
    captured = PageSumSequenceGenerator([pagesum], dictionary, decoding="graph" if device.type == "cuda" else "static",
                                        **settings)
    stock = SequenceGenerator([bart], dictionary, beam_size=beam, max_len_a=0, max_len_b=length + 1,
                              min_len=length + 1, tokens_to_suppress=("<s>",))
    flat = src[:, 0]  # (1, page_len)
    bos = flat.new_full((1, 1), dictionary.bos())
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(dictionary.pad()).sum((1, 2))}}
    flat_sample = {"net_input": {"src_tokens": flat, "src_lengths": flat.ne(dictionary.pad()).sum(1)}}
    runs = {
        "PageSum, captured steps": lambda: captured.generate([pagesum], sample),
        "PageSum, step loop": lambda: ours.generate([pagesum], sample),
        "PageSum, fairseq's search loop": lambda: generate_in(fairseq_loop(ours), pagesum, sample),
        "fairseq SequenceGenerator": lambda: stock.generate([bart], flat_sample, prefix_tokens=bos),
        "transformers generate": lambda: hf.generate(
            flat, num_beams=beam, max_new_tokens=length + 2, min_new_tokens=length + 2, do_sample=False,
            decoder_start_token_id=dictionary.eos(), forced_bos_token_id=dictionary.bos(), early_stopping=True),
    }
    with tempfile.TemporaryDirectory() as work:
        translator = ctranslate2_translator(bart, dictionary, device, dtype, work)
    if translator is not None:
        source = [dictionary[i] for i in flat[0].tolist() if i != dictionary.pad()][:-1]  # it adds </s> itself
        runs["CTranslate2 translate_batch"] = lambda: translator.translate_batch(
            [source], beam_size=beam, min_decoding_length=length + 1, max_decoding_length=length + 1,
            target_prefix=[[dictionary[dictionary.bos()]]])
    rounds = alternating_rounds(runs, args.repeats, device)
    base, rival = "fairseq SequenceGenerator", "transformers generate"
    print("one-page rows done", file=sys.stderr, flush=True)
    rows = []
    for name, times in rounds.items():
        paired = statistics.median(t / b for t, b in zip(times, rounds[base]))
        faster = min(rounds[rival]) / min(times)  # the goal: PageSum at least ONE_PAGE_GOAL times faster
        rows.append([name, f"{min(times):.2f}", f"{min(times) / min(rounds[base]):.2f}x", f"{paired:.2f}x",
                     f"{faster:.2f}x"])
    return rows


def ctranslate2_translator(bart, dictionary, device, dtype, work: str) -> Optional[object]:
    """CTranslate2's translator of ``bart`` (fairseq's BART), converted by its fairseq converter
    from a checkpoint written in ``work`` as a translation model, on ``device`` in ``dtype``;
    None where CTranslate2 is not installed or cannot run on the device."""
    if ctranslate2 is None or (device.type == "cuda" and ctranslate2.get_cuda_device_count() == 0):
        return None
    args = copy.deepcopy(bart.args)
    args.arch, args.task, args.data, args.user_dir = "bart_large", "translation", work, None
    args.source_lang, args.target_lang = "src", "tgt"
    for lang in ("src", "tgt"):
        dictionary.save(os.path.join(work, f"dict.{lang}.txt"))
    checkpoint = os.path.join(work, "model.pt")
    torch.save({"args": args, "model": {k: v.float().cpu() for k, v in bart.state_dict().items()}}, checkpoint)
    converted = os.path.join(work, "ctranslate2")
    # the checkpoint is the one written just above: its pickled arguments are trusted
    FairseqConverter(checkpoint, work, source_lang="src", target_lang="tgt", unsafe_deserialization=True).convert(
        converted)
    compute = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
    return ctranslate2.Translator(converted, device=device.type, compute_type=compute, inter_threads=1,
                                  intra_threads=torch.get_num_threads())


def generate_in(context, model, sample):
    with context as generator:
        return generator.generate([model], sample)


def alternating_rounds(runs: Dict[str, Callable[[], object]], repeats: int, device) -> Dict[str, List[float]]:
    """Seconds of each run in every round (one warm-up each first). The runs take turns, in
    reverse order every other round, so that a change of the machine's load between rounds
    reaches every run alike: the ratio of two runs of one round is their paired ratio."""
    seconds: Dict[str, List[float]] = {name: [] for name in runs}
    with torch.no_grad():
        for name, run in runs.items():
            run()
        for repeat in range(repeats):
            for name, run in (list(runs.items()) if repeat % 2 == 0 else list(runs.items())[::-1]):
                synchronize(device)
                start_time = time.perf_counter()
                run()
                synchronize(device)
                seconds[name].append(time.perf_counter() - start_time)
    return seconds


# ---- 2. a step at 7 x 512, old against new ------------------------------------------------------


class StepState:
    """The state of a beam search over ``src`` whose self-attention caches hold ``length``
    random positions, and the steps that continue it."""

    def __init__(self, model, dictionary, encoder_out, batch: int, beam: int, length: int, steps: int, seed: int):
        self.model, self.beam = model, beam
        self.rows = batch * beam
        self.rng = torch.Generator().manual_seed(seed)
        model.set_beam_size(beam)
        set_cache_length(model, length + steps + 1)
        self.encoder_out = encoder_out  # one set of pages per example, shared by its beams
        self.state: Dict = {}
        device = encoder_out["encoder_out"][0].device
        self.tokens = random_words(dictionary, (self.rows, length), self.rng).to(device)
        model.decoder(self.tokens[:, :1], encoder_out=self.encoder_out, incremental_state=self.state)
        for module in model.decoder.modules():
            if isinstance(module, DecoderSelfAttention):
                fill_cache(module, self.state, length, self.rng)
        self.dictionary = dictionary

    def step(self) -> None:
        blocks = torch.arange(self.rows) // self.beam
        order = (blocks * self.beam + torch.randint(self.beam, (self.rows,), generator=self.rng)).to(self.tokens.device)
        words = random_words(self.dictionary, (self.rows, 1), self.rng).to(self.tokens.device)
        self.tokens = torch.cat([self.tokens.index_select(0, order), words], dim=1)
        self.model.decoder.reorder_incremental_state_scripting(self.state, order)
        self.model.decoder(self.tokens, encoder_out=self.encoder_out, incremental_state=self.state)

    def held_bytes(self) -> int:
        return tensor_bytes(tree_leaves(self.state))


def fill_cache(module: DecoderSelfAttention, state: Dict, length: int, rng: torch.Generator) -> None:
    """Replace the one-position cache by ``length`` random positions, in the module's own layout."""
    buffer = module._get_input_buffer(state)
    if "cache_key" in buffer:  # fused: (blocks, heads, capacity, beams, head_dim), read through the beam table
        for name in ("cache_key", "cache_value"):
            buffer[name].normal_(generator=None)
        readable = buffer["readable"]  # (rows, capacity, beams): 0 at the beam each row reads, -inf elsewhere
        rows, capacity, beams = readable.shape
        table = torch.randint(beams, (rows, length, 1), generator=rng).to(readable.device)
        readable.fill_(float("-inf"))
        readable[:, :length].scatter_(2, table, 0.0)
        buffer["length"] = length
    else:  # today's: (rows, heads, length, head_dim), written whole at every step
        rows, heads, _, head_dim = buffer["prev_key"].shape
        like = buffer["prev_key"]
        buffer["prev_key"] = torch.randn(rows, heads, length, head_dim, generator=rng).to(like)
        buffer["prev_value"] = torch.randn(rows, heads, length, head_dim, generator=rng).to(like)
        buffer["prev_key_padding_mask"] = None
    module._set_input_buffer(state, buffer)


def step_rows(args, size: ModelSize, device, dtype) -> List[List[object]]:
    step_size = ModelSize(size.embed_dim, size.ffn_dim, args.step_layers, size.heads, size.vocab_words)
    torch.manual_seed(args.seed)
    task, model = build_model(STEP_ARCHS[args.system], step_size, "--max-source-positions", str(args.page_len),
                              "--max-target-positions", str(max(args.lengths) + args.steps + 8), dropout=0.0)
    model.to(device=device, dtype=dtype).eval()
    rows = []
    for batch in args.batches:
        src = paged_source(task.dictionary, batch, args.pages, args.page_len,
                           torch.Generator().manual_seed(args.seed)).to(device)
        with torch.no_grad():
            encoder_out = model.encoder(src)  # the same for both attentions
        for length in args.lengths:
            result = {"today": {"s": float("inf")}, "fused": {"s": float("inf")}}
            with torch.no_grad():
                for repeat in range(args.repeats):
                    for name in (("today", "fused") if repeat % 2 == 0 else ("fused", "today")):
                        result[name] = measure_step_rows(model, task.dictionary, encoder_out, batch, length, args,
                                                         device, name == "today", result[name])
            old, new = result["today"], result["fused"]
            rows.append([batch, length, f"{old['s'] * 1e3:.0f}", f"{new['s'] * 1e3:.0f}", f"{old['s'] / new['s']:.2f}x",
                         f"{old['mb']:.0f}", f"{new['mb']:.0f}", f"{new['mb'] / old['mb']:.2f}x",
                         f"{old['moved'] / MB:.0f}", f"{new['moved'] / MB:.0f}", f"{new['must'] / MB:.0f}"])
            print(f"batch {batch}, {length} positions done", file=sys.stderr, flush=True)
    return rows


def measure_step_rows(model, dictionary, encoder_out, batch: int, length: int, args, device, today: bool,
                      best: Dict) -> Dict:
    """One run of ``args.steps`` steps of the search state at ``length``: the median step time,
    kept if better than ``best``, plus the peak memory and the bytes of one more step."""
    context = reference_attention(model) if today else contextlib.nullcontext()
    with context:
        search = StepState(model, dictionary, encoder_out, batch, args.beam, length, args.steps + 2, args.seed)
        search.step()  # warm-up
        times = []
        for _ in range(args.steps):
            synchronize(device)
            start_time = time.perf_counter()
            search.step()
            synchronize(device)
            times.append(time.perf_counter() - start_time)
        seconds = statistics.median(times)
        if "mb" in best and seconds >= best["s"]:
            return best
        held = search.held_bytes()
        with LiveStorages() as tracker:
            search.step()
        with OperatorBytes() as traffic:
            search.step()
    element = torch.finfo(next(model.parameters()).dtype).bits // 8
    must = sum(step_bytes(decoder_weight_bytes(model_size(model), element), args.step_layers,
                          model.decoder.embed_dim, element, batch, args.beam, args.pages, args.page_len,
                          length, shared=True).values())
    del search
    return {"s": seconds, "mb": (held + tracker.peak) / MB, "moved": traffic.bytes, "must": must}


def model_size(model) -> ModelSize:
    layer = model.decoder.layers[0]
    return ModelSize(model.decoder.embed_dim, layer.fc1.out_features, len(model.decoder.layers),
                     layer.self_attn.num_heads, len(model.decoder.dictionary) - 4)


class OperatorBytes(TorchDispatchMode):
    """The bytes of the tensor arguments and results of every operator run: what the
    operators read and write, counting a tensor once per operator that touches it."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func._schema.name.split("::")[-1] not in VIEWS:
            for tensor in tree_leaves((args, kwargs, out)):
                if isinstance(tensor, torch.Tensor):
                    self.bytes += tensor.numel() * tensor.element_size()
        return out


# operators that move no data: views and metadata
VIEWS = {"view", "_unsafe_view", "transpose", "permute", "expand", "slice", "select", "unsqueeze", "squeeze",
         "as_strided", "t", "alias", "unfold", "detach", "reshape", "split", "split_with_sizes", "unbind", "narrow"}


def main(argv=None):
    args = parse_args(argv)
    device, dtype = start(args)
    # --quick: a smoke run of the code paths, at widths that build in a moment
    size = CPU_SMALL if args.quick else BART_LARGE if device.type == "cuda" else BART_BASE
    name = {CPU_SMALL: "cpu_small", BART_LARGE: "bart.large", BART_BASE: "bart.base"}[size]
    print(f"Machine: {describe_device(device)}. Dimensions: {name} (d={size.embed_dim}, {size.heads} heads, "
          f"vocab {size.vocab_words + 4}) in {dtype_name(dtype)}, random weights, beam {args.beam}; transformers "
          f"{transformers.__version__}.", flush=True)
    if "one-page" in args.tables:
        print(f"\nOne page of {args.page_len} tokens, {size.layers}+{size.layers} layers, a {args.short}-token "
              f"summary, batch 1 ({args.repeats} rounds, taking turns; best round, and the median over rounds "
              f"of each round's ratio):\n", flush=True)
        print(markdown_table(["decoder", "s / summary (best)", "vs fairseq (best)", "vs fairseq (median of rounds)",
                              f"faster than transformers (best; goal for PageSum: {ONE_PAGE_GOAL:.0f}x)"],
                             one_page_rows(args, size, device, dtype)), flush=True)
    if "steps" in args.tables:
        print(f"\n{args.system}: a step at {args.pages} pages x {args.page_len} tokens, {args.step_layers} decoder layers (median of "
              f"{args.steps} steps, best of {args.repeats} runs, alternating); MB moved: the bytes of every "
              f"operator's arguments and results; MB must read: the step_bytes formula:\n", flush=True)
        print(markdown_table(["batch", "cache positions", "today ms", "fused ms", "speed-up", "today peak MB",
                              "fused peak MB", "peak ratio", "today MB moved", "fused MB moved", "MB must read"],
                             step_rows(args, size, device, dtype)), flush=True)


if __name__ == "__main__":
    main()
