"""Tiny HED models, clusters of documents as tensors, and dense references for HED's
sparse attentions."""

from typing import List, Sequence, Tuple

import torch
from fairseq.modules.transformer_layer import TransformerEncoderLayer

from builders.models import build_tiny

Cluster = Sequence[Sequence[int]]  # content ids of every document, no specials


def build_hed(data_dir: str, *extra_args: str):
    """(args, task, HEDModel) for an hed_tiny model over ``data_dir`` read through the
    documents view, in eval mode, without dropout."""
    return build_tiny(data_dir, "--view", "documents", "--max-source-tokens", "4096", *extra_args, arch="hed_tiny")


def concatenation(cluster: Cluster, dictionary) -> torch.Tensor:
    """(src_len,) the cluster as one sequence: <s> d1 </s> <s> d2 </s> ..."""
    bos, eos = dictionary.bos(), dictionary.eos()
    return torch.tensor([t for doc in cluster for t in (bos, *doc, eos)])


def document_sizes(cluster: Cluster) -> List[int]:
    """Tokens of every document of a cluster, <s> and </s> included."""
    return [len(doc) + 2 for doc in cluster]


def hed_attention_mask(sizes: Sequence[int]) -> torch.Tensor:
    """(src_len, src_len) bool, True where a query may attend to a key (Section 4.1): the
    same document, or both are start-of-document tokens. Written from the paper's rule,
    dense, as a reference."""
    doc = torch.tensor([n for n, size in enumerate(sizes) for _ in range(size)])
    starts = torch.zeros(len(doc), dtype=torch.bool)
    starts[torch.tensor([sum(sizes[:n]) for n in range(len(sizes))])] = True
    return (doc[:, None] == doc[None, :]) | (starts[:, None] & starts[None, :])


def restarted_positions(sizes: Sequence[int]) -> torch.Tensor:
    """(src_len,) 0, 1, ... within every document."""
    return torch.cat([torch.arange(size) for size in sizes])


def dense_reference_encoder(args, encoder, cluster: Cluster, dictionary) -> torch.Tensor:
    """The states (src_len, dim) of one cluster's concatenation through the HED encoder's
    own weights, in fairseq's stock encoder layers with the dense mask of Section 4.1."""
    tokens = concatenation(cluster, dictionary)
    sizes = document_sizes(cluster)
    x = encoder.embed_scale * encoder.embed_tokens(tokens)
    x = x + encoder.embed_positions.weight[restarted_positions(sizes) + encoder.padding_idx + 1]
    if encoder.layernorm_embedding is not None:
        x = encoder.layernorm_embedding(x)
    x = x.unsqueeze(1)  # (src_len, 1, dim)
    blocked = (~hed_attention_mask(sizes)).float()  # fairseq's attn_mask: 1 = may not attend
    for layer in encoder.layers:
        stock = TransformerEncoderLayer(args)  # the same weights in fairseq's own layer and attention
        stock.load_state_dict(layer.state_dict())
        x = stock.eval()(x, encoder_padding_mask=None, attn_mask=blocked)
    if encoder.layer_norm is not None:
        x = encoder.layer_norm(x)
    return x.squeeze(1)


def reference_cross_attention(scores: torch.Tensor, sizes: Sequence[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Eq. 3-5 written out literally, one document at a time, for one cluster.

    scores: (queries, src_len) over the cluster's concatenation (no padding)
    returns the key weights (queries, src_len) and the document weights (queries, docs)."""
    bounds = [sum(sizes[:n]) for n in range(len(sizes) + 1)]
    within = [torch.softmax(scores[:, bounds[n]: bounds[n + 1]], dim=-1) for n in range(len(sizes))]  # Eq. 3
    s = torch.softmax(torch.stack([scores[:, bounds[n]] for n in range(len(sizes))], dim=-1), dim=-1)  # Eq. 4
    weights = torch.cat([s[:, n: n + 1] * within[n] for n in range(len(sizes))], dim=-1)  # Eq. 5
    return weights, s
