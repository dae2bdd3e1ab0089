"""Tiny HED models, clusters of documents as tensors, and dense references for HED's
sparse attentions."""

from typing import List, Sequence, Tuple

import torch
from fairseq.data import data_utils
from fairseq.modules.transformer_layer import TransformerEncoderLayer

import pagesum_plugin  # noqa: F401  (registers the task, models and criterion)
from pagesum_plugin.checkpoints.builder import build_model

Cluster = Sequence[Sequence[int]]  # content ids of every document, no specials


def build_hed(data_dir: str, *extra_args: str):
    """(args, task, HEDModel) for an hed_tiny model over ``data_dir`` read through the
    documents view, in eval mode, without dropout."""
    torch.manual_seed(0)
    args, task, model = build_model(data_dir, "hed_tiny", "--view", "documents", "--max-source-tokens", "4096",
                                    "--criterion", "paged_label_smoothed_cross_entropy", "--optimizer", "adam",
                                    "--dropout", "0.0", "--cpu", *extra_args)
    return args, task, model.eval()


def sharpen_cross_attention(model, dictionary, seed: int = 0):
    """Make a random model's summaries depend strongly on the documents and end at
    different steps (as a trained model's do): cross-attention is amplified and </s>
    gets an output direction of its own."""
    with torch.no_grad():
        for layer in model.decoder.layers:
            layer.encoder_attn.out_proj.weight.mul_(50.0)
        weight = model.decoder.output_projection.weight  # tied with the embeddings
        weight[dictionary.eos()] = torch.randn(weight.size(1), generator=torch.Generator().manual_seed(seed)) * 0.1
    return model


def vocab(dictionary) -> Tuple[int, int]:
    """Content ids: past the specials, before the padding symbols of the dictionary."""
    return dictionary.nspecial, len(dictionary) - 8


def random_cluster(rng: torch.Generator, n_docs: int, low: int, high: int, min_len: int = 2, max_len: int = 12) -> List[List[int]]:
    docs = []
    for _ in range(n_docs):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=rng))
        docs.append(torch.randint(low, high, (length,), generator=rng).tolist())
    return docs


def cluster_batch(clusters: Sequence[Cluster], dictionary, max_docs: int = 0) -> torch.Tensor:
    """Clusters -> (batch, max_docs, doc_len) src_tokens, every document <s> doc </s>,
    missing documents all padding (what the documents view and its collater make)."""
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    width = max(len(d) for docs in clusters for d in docs) + 2
    n_docs = max(max_docs, max(len(docs) for docs in clusters))
    out = torch.full((len(clusters), n_docs, width), pad, dtype=torch.long)
    for i, docs in enumerate(clusters):
        for j, doc in enumerate(docs):
            out[i, j, : len(doc) + 2] = torch.tensor([bos, *doc, eos])
    return out


def concatenation(cluster: Cluster, dictionary) -> torch.Tensor:
    """(src_len,) the cluster as one sequence: <s> d1 </s> <s> d2 </s> ..."""
    bos, eos = dictionary.bos(), dictionary.eos()
    return torch.tensor([t for doc in cluster for t in (bos, *doc, eos)])


def decoder_input(summaries: Sequence[Sequence[int]], dictionary) -> Tuple[torch.Tensor, torch.Tensor]:
    """(target, prev_output_tokens), each (batch, tgt_len): <s> s </s> and </s> <s> s."""
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    targets = [torch.tensor([bos, *s, eos]) for s in summaries]
    return (
        data_utils.collate_tokens(targets, pad, eos),
        data_utils.collate_tokens(targets, pad, eos, move_eos_to_beginning=True),
    )


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
