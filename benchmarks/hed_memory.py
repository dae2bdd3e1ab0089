"""Peak memory of one HED training step as a cluster grows from 2 to 10 documents:
block-sparse HED vs HED with a dense mask vs PageSum's document pages.

For every document count n the script runs one training step (forward, label-smoothed
cross entropy, backward) of

* **HED, block-sparse** (this project's ``hed`` model): input (1, n, doc_len), every
  document ``<s> words </s>``. Self-attention runs within each document, plus the small
  SOD-to-SOD attention; cross-attention is Eq. 3-5 over the n * doc_len keys.
* **HED, dense mask**: the same model and weights with the encoder's self-attention
  computed as the paper's implementation does it, full attention over the concatenated
  cluster with a dense (tokens x tokens) mask that keeps the HED pattern. The two give
  the same loss (checked on the first configuration); only the memory differs.
* **PageSum, document pages** (``pagesum`` with the ``document`` view's input): the same
  n documents as pages, each encoded alone, and the decoder run once per page.

All three decode the same summary of ``--tgt-len`` tokens. Weights are random: memory
does not depend on them.

What is measured: ``peak MB``, the most tensor memory the step holds at once on top of
the model's weights (activations kept for backward, gradients, temporaries), with
``benchmarks.common.peak_step_bytes`` (on CPU torch's ``MemTracker``, which follows every
tensor storage an operator creates). ``x n=2``: each value divided by its value at
the smallest document count.

Attention kernels (``--attention``): ``math`` (default) restricts
``F.scaled_dot_product_attention`` to its reference kernel, which materialises the
score matrix, as the paper's implementation does; ``fused`` lets torch pick a fused
kernel. All three models run under the same setting.

    python -m benchmarks.hed_memory
    python -m benchmarks.hed_memory --docs 2 4 --doc-len 128
"""

import argparse
import sys
from typing import Dict, List

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from benchmarks.common import (ATTENTION_KERNELS, CPU_SMALL, build_model, describe_device, markdown_table,
                               free_memory, paged_source, peak_step_bytes, start, summary_io, training_step)
from pagesum_plugin.systems.hed.attention import DocumentLayout, DocumentSelfAttention

MODELS = ("HED block-sparse", "HED dense mask", "PageSum doc pages")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, nargs="+", default=list(range(2, 11)),
                        help="documents per cluster (default: 2 to 10)")
    parser.add_argument("--doc-len", type=int, default=384,
                        help="tokens per document, <s> and </s> included (default: 384; 10 documents = 3,840 tokens)")
    parser.add_argument("--tgt-len", type=int, default=128, help="summary tokens (default: 128)")
    parser.add_argument("--attention", choices=ATTENTION_KERNELS, default="math")
    parser.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(device="cpu")  # no --device: CPU only
    return parser.parse_args(argv)


class DenseMaskSelfAttention(DocumentSelfAttention):
    """HED's encoder self-attention as one dense masked attention per cluster: the whole
    concatenation attends to itself, (tokens x tokens) scores per head, with the mask
    "same document, or both start-of-document tokens"."""

    def forward(self, query, key, value, key_padding_mask=None, **unused):
        layout: DocumentLayout = key_padding_mask
        n_tokens, _, dim = query.shape
        x = query.view(n_tokens, dim)
        heads, head_dim = self.num_heads, self.head_dim

        def per_cluster(t):  # (n_tokens, dim) -> (batch, heads, src_len, head_dim)
            return layout.to_clusters(t).view(layout.batch_size, -1, heads, head_dim).transpose(1, 2)

        q, k, v = per_cluster(self.q_proj(x) * self.scaling), per_cluster(self.k_proj(x)), per_cluster(self.v_proj(x))
        doc_map = layout.document_map()  # (batch, src_len)
        first = torch.zeros_like(doc_map, dtype=torch.bool)
        first[:, 0] = True
        first[:, 1:] = doc_map[:, 1:] != doc_map[:, :-1]
        starts = first & doc_map.ge(0)
        allowed = (doc_map[:, :, None] == doc_map[:, None, :]) & doc_map.ge(0)[:, None, :]
        allowed = allowed | (starts[:, :, None] & starts[:, None, :])  # (batch, src_len, src_len)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None], scale=1.0)
        out = out.transpose(1, 2)[layout.cluster_of_token, layout.offset_in_cluster]  # (n_tokens, heads, head_dim)
        return self.out_proj(out.reshape(n_tokens, 1, dim)), None


def build(arch: str, *extra: str):
    """(dictionary, model) for ``arch`` at the CPU size, in training mode."""
    torch.manual_seed(0)
    task, model = build_model(arch, CPU_SMALL, *extra)
    return task.dictionary, model.train()


def with_dense_mask(model):
    """The same model and weights, its encoder self-attention swapped for the dense one."""
    for layer in model.encoder.layers:
        sparse = layer.self_attn
        dense = DenseMaskSelfAttention(sparse.embed_dim, sparse.num_heads, dropout=sparse.dropout_module.p,
                                       self_attention=True)
        dense.load_state_dict(sparse.state_dict())
        layer.self_attn = dense
    return model


def check_dense_equals_sparse(models, src, target, prev, pad) -> None:
    """The dense-mask model computes exactly what the block-sparse one does."""
    losses = []
    for name in MODELS[:2]:
        models[name].eval()
        with torch.no_grad():
            logits, _ = models[name](src, None, prev)
        losses.append(F.cross_entropy(logits.view(-1, logits.size(-1)), target.view(-1), ignore_index=pad))
        models[name].train()
    assert torch.allclose(losses[0], losses[1], atol=1e-5), f"dense {losses[1]} != block-sparse {losses[0]}"


def measure(args, device: torch.device) -> List[Dict[str, float]]:
    dictionary, hed = build("hed_bart_large")
    _, hed_dense = build("hed_bart_large")
    hed_dense.load_state_dict(hed.state_dict())
    with_dense_mask(hed_dense)
    _, pagesum = build("pagesum_bart_large", "--max-source-positions", str(args.doc_len))
    models = {MODELS[0]: hed, MODELS[1]: hed_dense, MODELS[2]: pagesum}

    generator = torch.Generator().manual_seed(args.seed)
    target, prev = summary_io(dictionary, 1, args.tgt_len, generator)
    rows = []
    for i, n_docs in enumerate(args.docs):
        src = paged_source(dictionary, 1, n_docs, args.doc_len, generator)  # (1, n_docs, doc_len)
        if i == 0:
            check_dense_equals_sparse(models, src, target, prev, dictionary.pad())
        row = {"docs": n_docs, "tokens": n_docs * args.doc_len}
        for name, model in models.items():
            step = training_step(model, src, target, prev, dictionary.pad())
            step()  # warm-up: the measured step allocates its gradients afresh
            model.zero_grad(set_to_none=True)
            row[name] = peak_step_bytes(step, device, [model]) / 2**20
            model.zero_grad(set_to_none=True)
            free_memory(device)
        rows.append(row)
        print(f"{n_docs} documents done", file=sys.stderr, flush=True)
    return rows


def render(rows, args, device: torch.device) -> str:
    first = rows[0]
    header = ["docs", "tokens"] + [f"{m} peak MB" for m in MODELS] + [f"{m} x n={first['docs']}" for m in MODELS]
    table = [
        [r["docs"], r["tokens"]] + [f"{r[m]:.0f}" for m in MODELS] + [f"{r[m] / first[m]:.2f}x" for m in MODELS]
        for r in rows
    ]
    setup = (
        f"Machine: {describe_device(device)}. Model: {CPU_SMALL.layers}+{CPU_SMALL.layers} layers, "
        f"d={CPU_SMALL.embed_dim}, ffn={CPU_SMALL.ffn_dim}, {CPU_SMALL.heads} heads, vocab {CPU_SMALL.vocab_words}"
        f"+specials, fp32, attention kernel: {args.attention}. Documents of {args.doc_len} tokens, summary of "
        f"{args.tgt_len} tokens, batch 1, one training step (forward + backward)."
    )
    return "\n\n".join([setup, markdown_table(header, table)])


def main(argv=None):
    args = parse_args(argv)
    device, _ = start(args)
    with sdpa_kernel(ATTENTION_KERNELS[args.attention]):
        rows = measure(args, device)
    print(render(rows, args, device))


if __name__ == "__main__":
    main()
