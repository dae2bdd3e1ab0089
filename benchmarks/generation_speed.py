"""Decoding speed of PageSum's page-combined beam search, and what page pruning costs.

Speed. For every (pages, beam) of the grid the script decodes a batch of random
documents with ``PageSumSequenceGenerator`` and a summary length forced to exactly
``--out-len`` tokens (``min_len = max_len``), so every configuration does the same
number of decoding steps. It reports

* ``summaries/s``: documents summarised per second;
* ``decoder tokens/s``: tokens produced per second, summed over beams
  (batch x beam x out-len / time): the rate at which the decoder extends hypotheses,
  each step of which runs over all pages of the hypothesis;

the fastest of ``--repeats`` timed runs after one warm-up (CUDA: between
``torch.cuda.synchronize`` calls). With ``--top-pages k`` the grid adds, for every
document longer than k pages, a run that decodes only its k most confident pages
(the generator's ``top_pages`` option; the page scoring pass is included in the time)
and its speed-up over decoding all pages.

Sizes: on CPU the ``pagesum_tiny`` dimensions (2+2 layers, d=64) in fp32; on CUDA the
``bart.large`` dimensions (12+12 layers, d=1024, ~50k vocabulary) in bf16. Weights are
random for the speed grid: with a forced output length, speed does not depend on them.

Fidelity of page pruning. Pruning changes the output whenever a dropped page would
have mattered, so it is measured on models that have learnt to use page confidence:
``pagesum_tiny`` trained for ``--train-updates`` steps on a synthetic *salient page*
task, where some pages of a document start with a marker word and the summary is the
words that follow the markers. With one salient page, the whole summary lives on one
page (the best case for pruning); with two, keeping a single page must lose half of
it. For held-out documents the table gives how often the best hypothesis with
``top_pages=k`` differs from full decoding, token for token, and how often full
decoding reproduces the reference (how well the model was trained).

    python -m benchmarks.generation_speed --device cpu
    python -m benchmarks.generation_speed --device cuda
"""

import argparse
import sys
from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F

from benchmarks.common import (
    BART_LARGE,
    CPU_TINY,
    add_device_args,
    best_seconds,
    build_model,
    describe_device,
    dtype_name,
    markdown_table,
    paged_source,
    start,
)
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_device_args(parser)
    parser.add_argument("--pages", type=int, nargs="+", help="page counts (default: 1 2 4 8; --quick: 1 2 4)")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--top-pages", type=int, default=2, help="k of the page-pruning runs (0: none)")
    parser.add_argument("--page-len", type=int, help="tokens per page (default: 128 on CPU, 1024 on CUDA)")
    parser.add_argument("--out-len", type=int, help="forced summary length (default: 32 on CPU, 128 on CUDA)")
    parser.add_argument("--batch", type=int, help="documents per batch (default: 4 on CPU, 8 on CUDA)")
    parser.add_argument("--repeats", type=int, help="timed runs per configuration (default: 3, --quick: 1)")
    parser.add_argument("--train-updates", type=int, help="updates of the fidelity model (default: 600, --quick: 100)")
    parser.add_argument("--fidelity-docs", type=int, default=200, help="held-out documents for the fidelity table")
    args = parser.parse_args(argv)
    on_cuda = args.device == "cuda"
    args.pages = args.pages or ([1, 2, 4] if args.quick else [1, 2, 4, 8])
    args.page_len = args.page_len or (1024 if on_cuda else (64 if args.quick else 128))
    args.out_len = args.out_len or (128 if on_cuda else (16 if args.quick else 32))
    args.batch = args.batch or (8 if on_cuda else 4)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.train_updates = args.train_updates if args.train_updates is not None else (100 if args.quick else 600)
    if args.quick:
        args.fidelity_docs = min(args.fidelity_docs, 50)
    return args


def make_generator(model, dictionary, beam: int, out_len: int, top_pages: int = 0) -> PageSumSequenceGenerator:
    return PageSumSequenceGenerator(
        [model], dictionary, beam_size=beam, max_len_a=0, max_len_b=out_len, min_len=out_len, top_pages=top_pages
    )


def net_input(src_tokens: torch.Tensor, pad: int) -> Dict[str, Dict[str, torch.Tensor]]:
    page_counts = src_tokens[:, :, 0].ne(pad).sum(dim=1)  # (batch,)
    return {"net_input": {"src_tokens": src_tokens, "src_lengths": page_counts}}


# ---- speed ----------------------------------------------------------------------------


def speed_grid(args, device: torch.device, dtype: torch.dtype) -> Tuple[str, List[List[object]]]:
    size = BART_LARGE if device.type == "cuda" else CPU_TINY
    torch.manual_seed(args.seed)
    task, model = build_model("pagesum_bart_large", size, "--max-source-positions", str(args.page_len), dropout=0.0)
    model.to(device=device, dtype=dtype).eval()
    dictionary = task.dictionary
    caption = (
        f"Machine: {describe_device(device)}. Model: {size.layers}+{size.layers} layers, d={size.embed_dim}, "
        f"{size.heads} heads, vocab {len(dictionary)}, {dtype_name(dtype)}. "
        f"Batch {args.batch} documents, pages of {args.page_len} tokens, "
        f"summaries of exactly {args.out_len} tokens, best of {args.repeats} runs."
    )
    generator = torch.Generator().manual_seed(args.seed)
    rows = []
    for n_pages in args.pages:
        src_tokens = paged_source(dictionary, args.batch, n_pages, args.page_len, generator)  # (batch, pages, len)
        sample = net_input(src_tokens.to(device), dictionary.pad())
        for beam in args.beams:
            full = decoding_rate(model, dictionary, sample, beam, 0, args, device)
            rows.append([n_pages, beam, "all", f"{full[0]:.2f}", f"{full[1]:.0f}", "1.00x"])
            if 0 < args.top_pages < n_pages:
                pruned = decoding_rate(model, dictionary, sample, beam, args.top_pages, args, device)
                speedup = f"{pruned[0] / full[0]:.2f}x"
                rows.append([n_pages, beam, args.top_pages, f"{pruned[0]:.2f}", f"{pruned[1]:.0f}", speedup])
            print(f"pages={n_pages} beam={beam} done", file=sys.stderr, flush=True)
    return caption, rows


def decoding_rate(model, dictionary, sample, beam: int, top_pages: int, args, device):
    """(summaries/s, decoder tokens/s) for one configuration."""
    generator = make_generator(model, dictionary, beam, args.out_len, top_pages)
    hypos = generator.generate([model], sample)
    lengths = {len(h[0]["tokens"]) for h in hypos}
    # <s> + out_len summary tokens + </s>: the forced length really was decoded
    assert lengths == {args.out_len + 2}, f"expected summaries of {args.out_len + 2} tokens, got lengths {lengths}"
    seconds = best_seconds(lambda: generator.generate([model], sample), device, args.repeats, warmup=0)
    batch = sample["net_input"]["src_tokens"].size(0)
    return batch / seconds, batch * beam * args.out_len / seconds


# ---- fidelity of page pruning ------------------------------------------------------------


def salient_page_batch(dictionary, batch: int, n_pages: int, page_len: int, summary_len: int, salient: int, generator):
    """Documents of ``n_pages`` random pages, ``salient`` of which start with the marker
    word; the summary is the words after the marker, ``summary_len // salient`` from each
    salient page in document order. Returns (src_tokens, target, prev_output_tokens)."""
    marker = dictionary.nspecial  # the first ordinary word, reserved as the marker
    src = paged_source(dictionary, batch, n_pages, page_len, generator)  # (batch, pages, page_len)
    src[src == marker] = marker + 1
    chosen = torch.rand(batch, n_pages, generator=generator).argsort(dim=1)[:, :salient].sort(dim=1).values
    rows = torch.arange(batch)[:, None]  # (batch, 1)
    src[rows, chosen, 1] = marker
    words = src[rows, chosen, 2 : 2 + summary_len // salient].flatten(1)  # (batch, summary_len)
    bos = torch.full((batch, 1), dictionary.bos())
    eos = torch.full((batch, 1), dictionary.eos())
    target = torch.cat([bos, words, eos], dim=1)  # <s> summary </s>
    prev_output_tokens = torch.cat([eos, bos, words], dim=1)  # </s> <s> summary
    return src, target, prev_output_tokens


FIDELITY_TASK = {"n_pages": 4, "page_len": 16, "summary_len": 4}


def train_salient_model(model, dictionary, salient: int, updates: int, seed: int, device: torch.device):
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(updates):
        batch = salient_page_batch(dictionary, 32, salient=salient, generator=generator, **FIDELITY_TASK)
        src, target, prev = (t.to(device) for t in batch)
        logits, _ = model(src, None, prev)  # (batch, tgt_len, vocab)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1), label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def fidelity_rows(args, device: torch.device) -> Tuple[str, List[List[object]]]:
    """(caption, rows): how often pruned decoding's best hypothesis differs from full
    decoding's, for a summary drawn from one page (pruning to the top page can be exact)
    and from two (keeping one page must lose half of it)."""
    rows = []
    for salient in (1, 2):
        torch.manual_seed(args.seed)
        task, model = build_model("pagesum_bart_large", CPU_TINY, "--max-source-positions", "64", dropout=0.0)
        dictionary = task.dictionary
        train_salient_model(model.to(device), dictionary, salient, args.train_updates, args.seed, device)
        test_rng = torch.Generator().manual_seed(args.seed + 1)
        src, target, _ = salient_page_batch(
            dictionary, args.fidelity_docs, salient=salient, generator=test_rng, **FIDELITY_TASK
        )
        src, target = src.to(device), target.to(device)
        for beam in args.beams:
            full = decode_best(model, dictionary, src, beam, 0)
            exact = sum(h == t for h, t in zip(full, target.tolist()))
            for k in range(1, FIDELITY_TASK["n_pages"]):
                pruned = decode_best(model, dictionary, src, beam, k)
                differ = sum(a != b for a, b in zip(full, pruned))
                rows.append(
                    [salient, f"{exact / len(full):.0%}", beam, f"{k} of {FIDELITY_TASK['n_pages']}",
                     f"{differ}/{len(full)} ({differ / len(full):.1%})"]
                )
        print(f"fidelity: summaries from {salient} page(s) done", file=sys.stderr, flush=True)
    caption = (
        f"Fidelity of page pruning: pagesum_tiny trained {args.train_updates} updates on the salient-page task "
        f"({FIDELITY_TASK['n_pages']} pages of {FIDELITY_TASK['page_len']} tokens, summaries of "
        f"{FIDELITY_TASK['summary_len']} words), {args.fidelity_docs} held-out documents, fp32."
    )
    return caption, rows


def decode_best(model, dictionary, src_tokens, beam: int, top_pages: int) -> List[List[int]]:
    summary_len = FIDELITY_TASK["summary_len"]
    generator = PageSumSequenceGenerator(
        [model], dictionary, beam_size=beam, max_len_a=0, max_len_b=summary_len + 2, top_pages=top_pages
    )
    hypos = generator.generate([model], net_input(src_tokens, dictionary.pad()))
    return [h[0]["tokens"].tolist() for h in hypos]


def main(argv=None):
    args = parse_args(argv)
    device, dtype = start(args)
    speed_caption, speed = speed_grid(args, device, dtype)
    fidelity_caption, fidelity = fidelity_rows(args, device)
    speed_header = ["pages", "beam", "pages decoded", "summaries/s", "decoder tokens/s", "speed-up"]
    fidelity_header = ["summary drawn from pages", "full decoding = reference", "beam", "pages kept", "pruned differs"]
    print("\n\n".join([speed_caption, markdown_table(speed_header, speed),
                       fidelity_caption, markdown_table(fidelity_header, fidelity)]))


if __name__ == "__main__":
    main()
