"""PageSum at bart.large scale: the rows of the GPU scale table, in row groups that each fit in
one short call, appended to one results file and rendered together.

Weights are random (cost does not depend on them); inputs are the benchmarks' random paged
documents (``benchmarks.common``). On CUDA the models have the ``bart.large`` dimensions
(12+12 layers, d=1024, ffn 4096, 16 heads, ~50k vocabulary) in bf16; on the CPU, for a smoke
run, the ``pagesum_tiny`` dimensions in fp32 on tiny lengths. Every table has its goal and a
verdict computed from the measurement; a verdict that only means something at bart.large
scale on a GPU reads "n/a on CPU" (with what the tiny run gave in brackets).

Row groups. ``--rows`` takes rows (``4``: all its groups) and groups (``4:900``); ``--list``
names them, ``--plan`` prints each one's estimate on an H100 and an H200 without running
anything. Before a group starts, the script prints its estimate (``costs``: start-up, model
building, operators launched from the host, FLOPs against the bf16 peak and bytes against the
memory bandwidth, each at a stated efficiency); each default group stays under 8 minutes on
an H100. ``--time-left S`` skips, and records as skipped, a group whose estimate exceeds what
is left of the call. Groups by default: ``1``, ``2``, ``3``, ``4:256``, ``4:900``, ``5:256``,
``5:900``, ``5:fidelity``, ``6:arxiv``, ``6:govreport``.

Results. Each group appends its records to ``--results`` (JSON lines, ``results``) when it
finishes; a later call appends to the same file. ``--report`` renders BENCHMARKS.md's tables
from it without running anything, each group from its latest finished run.

Out of memory. Any CUDA allocation failure counts (``torch.cuda.OutOfMemoryError``, and the
``RuntimeError``s of cuBLAS and cuDNN allocation failures: ``profiling.is_out_of_memory``). A
configuration that runs out of memory is recorded as OOM, and its system is not tried on any
configuration at least as large (``oom.OomLedger``, which reads earlier calls' OOMs on the same
machine from the results file).

Memory. Peaks are reported as the allocator's tensors (allocated), its hold on the GPU
(reserved) and the whole GPU's use at the peak, with the CUDA context and the libraries'
workspaces (reserved plus what the driver counts outside the allocator): what a user's GPU
must have free. GB = 10^9 bytes.

Attention. Every row runs with torch's fused SDPA kernels allowed (flash, memory-efficient,
cuDNN, then math). fairseq only calls ``F.scaled_dot_product_attention`` for attention without
a cache and without ``static_kv``: the encoder's and the decoder's self-attention in training.
Cross-attention (``static_kv=True``) and every attention of incremental decoding take fairseq's
own bmm + softmax path. Rows 1 and 4 list the kernels each attention really ran (aten ops seen
inside its module, ``kernels``).

Rows (the formulas are in ``costs``)
1. Training peak memory (``training``): PageSum on ``--pages`` x ``--page-len`` source tokens
   (20 x 1024), a ``--tgt-len`` summary (1024), batch 1, activation checkpointing
   (``--checkpoint-activations``: fairseq's ``checkpoint_wrapper`` around every layer), one
   full optimizer update: forward, label-smoothed loss, backward, Adam step. The optimizer is
   fairseq's own ``--bf16`` one, built from fairseq's parsed options: ``FP16Optimizer`` around
   ``FairseqAdam``, i.e. bf16 weights and gradients in the model, fp32 master weights, fp32
   master gradients and fp32 Adam moments in the optimizer (2 + 2 + 4 + 4 + 8 = 20 bytes per
   parameter at the peak). Reported: what is held before the update and the peaks during it.
   Goal: peak reserved <= 12 GB.
2. Training peak memory growth (``training``): ``benchmarks.memory_scaling``'s models and step
   (forward + backward, no checkpointing, no optimizer; peak on top of the weights) for
   ``--growth-pages`` pages against a full-attention BART on the same tokens as one sequence,
   its positions extended, both under the fused kernels and under the math kernel (the score
   matrix stored, as BART's original attention does). Growth: peak over the peak at the fewest
   pages. Goal: PageSum linear, i.e. growth <= 1.25 x the page ratio; and where full attention
   stops (OOM).
3. Training throughput (``training``): PageSum on ``--mfu-pages`` x page-len (7 x 1024), the
   same summary, no checkpointing, the update of row 1, for batches 1, 2, 4, ... up to
   ``--max-batch`` or the first OOM, with model FLOPs per update from the model's matrix shapes
   (``costs``; at small sizes under the math kernel the formula agrees with
   ``torch.utils.flop_counter.FlopCounterMode`` to 0.01%, the page mixing left out). MFU =
   FLOPs / update time / the GPU's bf16 dense peak, at every batch tried. Goal: MFU >= 40% at
   the largest batch that fits.
4. Decoding throughput (``decoding``), one group per ``--out-lens``: beam search (summary
   length forced to exactly that many tokens) over ``--decode-pages`` x page-len pages, beam 4,
   batches ``--batches``, each example's pages shared by its beams against one copy per beam
   (the layout before beam sharing, ``set_beam_size(beam, share_pages=False)``). tokens/s =
   batch x beam x summary tokens / search time; the step time is the mean interval between the
   generator's decoder calls (``beam_cache.DecoderCalls``), so the encoder pass is not in it;
   bound = the bytes one step must read (``costs.step_bytes``) / the memory bandwidth. Goals:
   shared >= 2x per beam; shared step <= 1.5x the bound.
5. Page pruning (``pruning``), one group per ``--out-lens``: the generator's ``top_pages`` k =
   ``--top-pages`` (2 of 7) against all pages, for every batch of row 4. Goal: >= 3x faster.
   Group ``5:fidelity``: ``generation_speed``'s fidelity table, at its own size
   (``pagesum_tiny`` trained on the salient-page task: a random bart.large has no page
   preference to preserve), and it says so.
6. Production decoding (``production``), one group per ``--production-datasets``: the
   dataset's generation defaults (``pagesum_plugin.generation.defaults``: beam, length penalty,
   trigram blocking, minimum and maximum summary length) against the same search without the
   n-gram blocker, for every batch of row 4. Goal: step <= 1.5x the bound.

Peaks: bf16 dense FLOP/s and memory bandwidth by GPU name (``hardware.GPU_PEAKS``), or
``--peak-tflops`` / ``--peak-bandwidth``.

    python -m benchmarks.scale --device cuda --plan
    python -m benchmarks.scale --device cuda --rows 1 2 3 --results runs/device/scale.jsonl
    python -m benchmarks.scale --report --results runs/device/scale.jsonl
    python -m benchmarks.scale --device cpu --quick --threads 1
"""
