"""Compiled decoding (``--compile-decoder``): graphs compiled, layer calls that ran compiled, and
search times, against decoder depth, for the plugin's compilation against ``Module.compile``
on each layer.

``per layer``: each decoder layer compiled by torch's ``Module.compile(dynamic=True)``, as
the plugin did before: fairseq keys each attention's cached state by a random id per module,
torch.compile guards on it, so each layer compiles graphs of its own on the one code object of
the layer class, until torch's recompile limit (8) sends the other calls to eager.
``shared``: ``modules.compiled_layers`` (the layers see their state under the same keys, so
one set of graphs serves the stack). Each row builds a fresh PageSum model of that depth,
resets torch.compile's caches, runs one eager search, then the first compiled search (which
pays the compilation) and the next ones (best of ``--repeats``). ``profiling.CountedGraphs``
wraps ``--backend`` to count the graphs in use and their calls.

    python -m benchmarks.compiled_decoding --device cpu
"""

import argparse

import torch
import torch._dynamo

from benchmarks.common import CPU_TINY, BART_LARGE, add_device_args, build_model, describe_device, markdown_table, \
    paged_source, start
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator
from pagesum_plugin.modules.compiled_layers import compile_decoder_layers
from pagesum_recipes.profiling import CountedGraphs, best_seconds, count_calls


def compile_per_layer(model, backend) -> None:
    for layer in model.decoder.layers:
        layer.compile(dynamic=True, backend=backend)


COMPILATIONS = {"per layer": compile_per_layer, "shared": compile_decoder_layers}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 6, 12], help="decoder depths")
    parser.add_argument("--backend", help="torch.compile backend (default: inductor on CUDA, aot_eager on CPU)")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--steps", type=int, default=16, help="summary tokens per search (forced)")
    parser.add_argument("--repeats", type=int, default=3, help="compiled searches after the first (best of)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    device, dtype = start(args)
    backend = args.backend or ("inductor" if device.type == "cuda" else "aot_eager")
    size = BART_LARGE if device.type == "cuda" else CPU_TINY
    if args.quick:
        args.layers, args.steps, args.repeats = [2, 4], 4, 1
    rows = []
    for layers in args.layers:
        for name, compile_layers in COMPILATIONS.items():
            torch.manual_seed(args.seed)
            task, model = build_model("pagesum_bart_large", size, "--decoder-layers", str(layers), dropout=0.0)
            model.to(device=device, dtype=dtype).eval()
            src = paged_source(task.dictionary, 3, 3, 32, torch.Generator().manual_seed(args.seed)).to(device)
            src[1, 2:] = task.dictionary.pad()  # examples of 3, 2 and 3 pages
            sample = {"net_input": {"src_tokens": src}}
            generator = PageSumSequenceGenerator([model], task.dictionary, beam_size=args.beam, max_len_a=0,
                                                 max_len_b=args.steps, min_len=args.steps, decoding="eager")

            def search():
                with torch.no_grad():
                    generator.generate([model], sample)

            eager = best_seconds(search, device, repeats=1)  # after one search that warms up
            torch._dynamo.reset()
            counting = CountedGraphs(backend)
            compile_layers(model, counting)
            first = best_seconds(search, device, repeats=1, warmup=0)  # pays the compilation
            compiled_before, decoder_calls = sum(counting.calls.values()), count_calls(model.decoder)
            after = best_seconds(search, device, repeats=args.repeats, warmup=0)
            graph_calls = (sum(counting.calls.values()) - compiled_before) // args.repeats
            layer_calls = layers * decoder_calls["forward"] // args.repeats
            rows.append([layers, name, len(counting.calls), f"{graph_calls} of {layer_calls}", f"{first:.2f}",
                         f"{after:.3f}", f"{eager:.3f}"])
            torch._dynamo.reset()
    print(f"Machine: {describe_device(device)}. Backend {backend}; PageSum with "
          f"d={size.embed_dim}, {size.heads} heads, {args.beam} beams, 3 examples of 3, 2 and 3 pages of 32 tokens, "
          f"{args.steps} summary tokens; next search: best of {args.repeats}.")
    print(markdown_table(["decoder layers", "compiled", "graphs", "layer calls compiled", "first search s",
                          "next search s", "eager search s"], rows))


if __name__ == "__main__":
    main()
