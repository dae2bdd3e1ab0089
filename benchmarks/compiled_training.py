"""A training step with every encoder and decoder layer and the loss's chunk compiled
(``--compile-layers``, ``modules/compiled_layers.py``, ``PagedLabelSmoothedCrossEntropy.compile_chunks``)
against the eager one: the operators the host still launches outside the compiled graphs, the
graphs a stack shares, the loss and gradients, and the time. Then the compiled step with its pass
captured as CUDA graphs (``--capture-training``, ``training_capture.py``): the operators launched
outside the graphs, and its loss and gradients; on the CPU the graphs are a stand-in that runs
the pass eager in a region the count leaves out (``graph_standin.py``), so that only the count and
the errors mean something there.

A step is forward, the recipes' loss (the plugin's criterion, ``LOSS_CHUNK_TOKENS`` summary
tokens at a time) and backward, of PageSum, or HED with each page a document (``--system``), at
each depth of ``--layers`` (tiny widths on the CPU, ``bart.large``'s on CUDA in bf16). Operators
launched: the top-level ATen operators torch's profiler records outside every compiled region
(in backward too), after two warm-up steps; on the CPU the layers compile through ``aot_eager``
(no code is generated, so the times say nothing), on CUDA through inductor. A second table times
what a call through ``compiled`` (every compiled layer's and loss chunk's) adds to the host's
time, beside its graph.

    python -m benchmarks.compiled_training --device cpu [--system hed]
"""

import argparse
import time
from typing import Callable, Dict, Tuple

import torch

from benchmarks.common import (BART_LARGE, CPU_TINY, Backward, ModelSize, add_device_args, best_seconds, build_model,
                               criterion_and_sample, describe_device, markdown_table, paged_source, start, summary_io)
from pagesum_plugin.architectures import LOSS_CHUNK_TOKENS
from benchmarks.graph_standin import REPLAYED, capture_options
from pagesum_plugin.modules.compiled_layers import compile_model_layers, compiled
from pagesum_plugin.training_capture import CapturedTraining
from pagesum_recipes.profiling import CountedGraphs

STANDIN_NOTE = ", here their stand-in on the CPU (its times mean nothing)"
# --system: (its bart.large architecture, the name the tables give it, the tokens each layer of a stack reads
# per (batch, pages, page_len, tgt_len): PageSum decodes every page, HED each cluster once)
SYSTEMS = {
    "pagesum": ("pagesum_bart_large", "PageSum", lambda b, p, n, t: b * p * (n + t)),
    "hed": ("hed_bart_large", "HED (each page a document)", lambda b, p, n, t: b * (p * n + t)),
}


def launched_outside_compiled(step: Callable[[], None]) -> int:
    """Top-level ATen operators that ``step`` runs outside every compiled region (and outside a
    stand-in's replayed graph)."""
    return outside_compiled(step)[0]


def outside_compiled(step: Callable[[], None]) -> Tuple[int, int]:
    """(every top-level ATen operator ``step`` runs outside compiled regions and replayed graphs,
    those of them that are not views (``is_view``: they launch no kernel on a GPU)), from one run
    under torch's profiler."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        step()
    every = kernels = 0
    for event in profile.events():
        if not event.name.startswith("aten::"):
            continue
        parent, top, compiled = event.cpu_parent, True, False
        while parent is not None:
            top &= not parent.name.startswith("aten::")
            # "Torch-Compiled Region", "CompiledFunction(Backward)"
            compiled |= "Compiled" in parent.name or parent.name == REPLAYED
            parent = parent.cpu_parent
        if top and not compiled:
            every += 1
            kernels += not is_view(event.name)
    return every, kernels


def is_view(name: str) -> bool:
    """Whether the ATen operator ``name`` ("aten::detach") returns a view of its first input:
    its schema's first result aliases it, without writing (every overload's alike)."""
    packet = getattr(torch.ops.aten, name.split("::")[1], None)
    if packet is None:
        return False
    schema = getattr(packet, packet.overloads()[0])._schema
    alias = schema.returns[0].alias_info if schema.returns else None
    return alias is not None and not alias.is_write


def ffn_wide_kept(step: Callable[[], None], model, layer_tokens: int) -> float:
    """ffn-wide tensors that autograd keeps for backward while ``step`` runs, per token and
    layer: the elements of every kept ffn-wide storage (parameters aside), each counted once,
    over ffn x ``layer_tokens`` (the tokens each layer reads, summed over the layers). The folded feed-forward keeps one
    (``modules/feed_forward.py``); fairseq's two."""
    ffn = model.encoder.layers[0].fc1.out_features
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    kept = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if tensor.dim() and tensor.size(-1) == ffn and storage.data_ptr() not in parameters:
            kept[storage.data_ptr()] = storage.nbytes() // tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step()
    return sum(kept.values()) / (ffn * layer_tokens)


def training_step(model, task, src_tokens, target, prev_output_tokens):
    """(criterion, step, captured step): forward, the recipes' loss (``LOSS_CHUNK_TOKENS`` summary
    tokens at a time), backward; the captured step replays the pass from CUDA graphs, or on the
    CPU from their stand-in (the first call captures). Each returns the loss."""
    criterion, sample = criterion_and_sample(task, src_tokens, target, prev_output_tokens, LOSS_CHUNK_TOKENS)
    captured = CapturedTraining(criterion, **capture_options(src_tokens.device))

    def step():
        model.zero_grad(set_to_none=True)
        loss, _, _ = criterion(model, sample)
        loss.backward()
        return loss.detach()

    def captured_step():
        model.zero_grad(set_to_none=True)
        loss, _, _ = captured.train_step(model, sample, Backward)
        return loss.detach()

    return criterion, step, captured_step


def measure(args, layers: int, device, dtype, captured: bool = True) -> Dict[str, object]:
    """The eager step against the compiled one, and, where ``captured``, the compiled one
    captured (``--capture-training``)."""
    base = BART_LARGE if device.type == "cuda" else CPU_TINY
    size = ModelSize(base.embed_dim, base.ffn_dim, layers, base.heads, base.vocab_words)
    torch.manual_seed(args.seed)
    arch, _, tokens_per_layer = SYSTEMS[args.system]
    task, model = build_model(arch, size, "--max-source-positions", str(args.page_len), dropout=0.0)
    model.to(device=device, dtype=dtype).train()
    generator = torch.Generator().manual_seed(args.seed)
    src = paged_source(task.dictionary, args.batch, args.pages, args.page_len, generator).to(device)
    target, prev = (t.to(device) for t in summary_io(task.dictionary, args.batch, args.tgt_len, generator))
    criterion, step, captured_step = training_step(model, task, src, target, prev)
    eager_loss = step()
    eager_grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    eager_ops = launched_outside_compiled(step)
    eager_s = best_seconds(step, device, args.repeats)
    layer_tokens = tokens_per_layer(args.batch, args.pages, args.page_len, args.tgt_len) * layers  # both stacks
    eager_kept = ffn_wide_kept(step, model, layer_tokens)

    counted = CountedGraphs("inductor" if device.type == "cuda" else "aot_eager")
    torch._dynamo.reset()
    compile_model_layers(model, counted)
    criterion.compile_chunks(counted)
    started = time.perf_counter()
    step()  # compiles the graphs
    compile_s = time.perf_counter() - started
    compiled_loss = step()
    grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    scale = max(float(g.abs().max()) for g in eager_grads.values())
    grad_error = max(float((grads[name] - g).abs().max()) for name, g in eager_grads.items()) / scale
    compiled_ops, compiled_kernels = outside_compiled(step)
    compiled_s = best_seconds(step, device, args.repeats)
    graphs = len(counted.calls)  # counted before the hooked step, which could compile anew
    compiled_kept = ffn_wide_kept(step, model, layer_tokens)

    measured = {"layers": layers, "eager ops": eager_ops, "compiled ops": compiled_ops, "graphs": graphs,
                "eager kept": eager_kept, "compiled kept": compiled_kept,
                "loss error": abs(float(compiled_loss) - float(eager_loss)) / abs(float(eager_loss)),
                "grad error": grad_error, "compile s": compile_s, "eager s": eager_s, "compiled s": compiled_s,
                "compiled kernels": compiled_kernels}
    if not captured:
        return measured
    captured_step()  # captures
    captured_loss = captured_step()
    captured_grads = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
    captured_ops, captured_kernels = outside_compiled(captured_step)
    return {**measured, "captured ops": captured_ops, "captured kernels": captured_kernels,
            "captured s": best_seconds(captured_step, device, args.repeats),
            "captured loss error": abs(float(captured_loss) - float(eager_loss)) / abs(float(eager_loss)),
            "captured grad error": max(float((captured_grads[name] - g).abs().max())
                                       for name, g in eager_grads.items()) / scale}


def call_microseconds(fn: Callable[[], None], calls: int, rounds: int = 5) -> float:
    """The host's time for one call of ``fn``: the best of ``rounds`` rounds of ``calls`` calls."""
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - started)
    return best / calls * 1e6


def compiled_call_cost(calls: int) -> Dict[str, float]:
    """What a call through ``compiled`` (every compiled layer's and loss chunk's) costs the host
    beside its graph: one operator called eager, and compiled (dynamo's guards, the setting each
    call runs under, and the same operator: the ``eager`` backend generates nothing), in us."""
    x = torch.ones(4)
    graphs = compiled(lambda t: t * 2, backend="eager")
    graphs(x)  # compiles
    return {"eager": call_microseconds(lambda: x * 2, calls), "compiled": call_microseconds(lambda: graphs(x), calls)}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--system", choices=sorted(SYSTEMS), default="pagesum")
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 6, 12], help="encoder = decoder layers")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--pages", type=int, default=3)
    parser.add_argument("--page-len", type=int, help="tokens per page (default: 32 on the CPU, 1024 on CUDA)")
    parser.add_argument("--tgt-len", type=int, help="summary tokens (default: 8 on the CPU, 256 on CUDA)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000, help="calls timed for a compiled call's host cost")
    args = parser.parse_args(argv)
    cuda = args.device == "cuda"
    args.page_len = args.page_len or (1024 if cuda else 32)
    args.tgt_len = args.tgt_len or (256 if cuda else 8)
    return args


def main(argv=None):
    args = parse_args(argv)
    device, dtype = start(args)
    print(f"Machine: {describe_device(device)}. {SYSTEMS[args.system][1]} in {str(dtype).split('.')[-1]}, "
          f"batch {args.batch}, {args.pages} pages of {args.page_len} tokens, {args.tgt_len}-token summaries; a training step: forward, "
          f"the recipes' loss ({LOSS_CHUNK_TOKENS} summary tokens at a time), backward. Operators: top-level ATen "
          f"operators outside compiled regions; errors relative (the gradients' to the largest); times: best of "
          f"{args.repeats}; ffn-wide kept: the feed-forward's ffn-wide tensors autograd keeps for backward, per "
          f"token and layer. Captured: the compiled step with its pass replayed from CUDA graphs "
          f"(--capture-training){'' if device.type == 'cuda' else STANDIN_NOTE}; "
          f"operators outside the graphs and the compiled regions.\n")
    rows, captured_rows = [], []
    for layers in args.layers:
        m = measure(args, layers, device, dtype)
        rows.append([layers, m["eager ops"], m["compiled ops"], f"{m['eager ops'] / m['compiled ops']:.1f}x",
                     m["graphs"], f"{m['loss error']:.1e}", f"{m['grad error']:.1e}", f"{m['compile s']:.1f}",
                     f"{m['eager s']:.4f}", f"{m['compiled s']:.4f}",
                     f"{m['eager kept']:.2f} / {m['compiled kept']:.2f}"])
        captured_rows.append([layers, m["eager ops"], m["captured ops"], f"{m['eager ops'] / m['captured ops']:.1f}x",
                              f"{m['compiled kernels']} / {m['captured kernels']}",
                              f"{m['captured loss error']:.1e}", f"{m['captured grad error']:.1e}",
                              f"{m['compiled s']:.4f}", f"{m['captured s']:.4f}"])
    print(markdown_table(["layers", "eager: operators / step", "compiled: operators outside", "fewer", "graphs",
                          "loss error", "gradient error", "first compiled step s", "eager step s",
                          "compiled step s", "ffn-wide kept per token and layer: eager / compiled"], rows))
    print("\nThe compiled step captured (--capture-training):\n")
    print(markdown_table(["layers", "eager: operators / step", "captured: operators outside the graphs", "fewer",
                          "views aside: compiled / captured", "loss error", "gradient error", "compiled step s",
                          "captured step s"], captured_rows))
    cost = compiled_call_cost(args.calls)
    print(f"\nThe host's time for a call of one operator, best of 5 rounds of {args.calls} calls:\n")
    added = cost["compiled"] - cost["eager"]
    print(markdown_table(["eager call us", "compiled call us", "a compiled call adds us"],
                         [[f"{cost['eager']:.1f}", f"{cost['compiled']:.1f}", f"{added:.1f}"]]))


if __name__ == "__main__":
    main()
