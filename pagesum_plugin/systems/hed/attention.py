"""HED's attentions (Shen et al., 2023, Section 4): hierarchical encoding and decoding.

A batch holds *clusters*, each of one or more documents ``<s> doc </s>``; the ``<s>`` that
opens a document is its start-of-document (SOD) token.

Encoder self-attention (Section 4.1). An ordinary token attends to the tokens of its own
document only; an SOD token attends to its own document and to the SOD tokens of the
other documents of its cluster, with one softmax over that union. The attention matrix
of a cluster is therefore block diagonal (one block per document) plus a small
SOD-to-SOD block, and it is computed that way, never as a dense matrix:

* the tokens of all documents of a batch are *packed*: one row of ``n_tokens`` tokens,
  without padding (``DocumentLayout``, worked out on the host from one read-back), so
  projections and feed-forward layers never see padding;
* within-document attention runs on documents grouped by length (lengths within a
  factor sqrt(2) share a group, padded to the group's longest), so its scores cost at
  most twice sum(document_length^2);
* the SOD-to-SOD scores of a cluster, (docs x docs) per head, are merged into the SOD
  rows by their log-sum-exps: softmax(a ++ b) @ (V_a ++ V_b) equals
  exp(lse_a - lse) softmax(a) @ V_a + exp(lse_b - lse) softmax(b) @ V_b with
  lse = logaddexp(lse_a, lse_b), exactly.

Decoder cross-attention (Eq. 3-5). With scores a of one query against the keys of its
cluster, w = softmax(a) within each document (Eq. 3), s = softmax of the documents' SOD
scores (Eq. 4), and the weight of token k of document n is s_n w_{n,k} (Eq. 5). That is
an ordinary softmax over a + c_{doc(k)} with c_n = log s_n - logsumexp_{k in n} a_k,
because the sum over all keys of exp(a_k + c_{doc(k)}) is sum_n s_n = 1; so it costs
one softmax over the keys plus per-document reductions. Every head of every decoder
layer attends this way.

The decoder reads the encoder's states of a cluster concatenated, document after
document, (src_len, batch, dim), with a *document map* (batch, src_len): the document
index (0, 1, ...) of every key, -1 for padding. HED's encoder puts that map where
fairseq's encoders put their padding mask, so fairseq's decoder layers hand it to the
cross-attention unchanged and reorder it with the states.
"""

import math
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor


LENGTH_GROUP_RATIO = math.sqrt(2.0)  # documents whose lengths differ less share a padded group


class DocumentShapes(NamedTuple):
    """Where the documents of a document map (batch, src_len) sit: what each cross-attention of a
    decoder lays its keys out by (``by_document``)."""
    starts: Tensor  # (batch, max_docs) the first column of every document, 0 where there is none
    lengths: Tensor  # (batch, max_docs) its tokens, 0: none
    longest: int  # the longest document's tokens, on the host


class DocumentLayout:
    """Where every token of a batch of clusters sits; built once per encoder call.

    src_tokens: (batch, max_docs, doc_len), every real document ``<s> ... </s>`` padded at
    its end; a padding document is all padding. The *packed* order holds the real
    documents of all clusters, cluster after cluster, each document's tokens in order.

    A layout is a few numbers per document and per token, so it is worked out on the host (in
    numpy) from one read-back of the documents' lengths, and its index tensors reach the
    device in one copy that does not wait for it (``to_device``). The shapes the layers take
    from it (``max_docs``, ``longest``, ``cluster_width``) are numbers on the host: no layer of
    the encoder asks the device anything. ``shapes()`` is what ``document_shapes`` gives of its
    ``document_map``: the decoder's cross-attentions take it from here.
    """

    def __init__(self, src_tokens: Tensor, pad: int):
        device = src_tokens.device
        self.batch_size, slots, doc_len = src_tokens.shape
        real = src_tokens.ne(pad)  # (batch, max_docs, doc_len)
        # the one read-back: every document's tokens, and one past its last token, which is the
        # same number unless padding sits inside the document
        ends = (real * torch.arange(1, doc_len + 1, device=device)).amax(dim=2)  # (batch, max_docs)
        lengths, ends = np.array(torch.stack([real.sum(dim=2), ends]).tolist(), dtype=np.int64)
        inside = np.argwhere(lengths != ends)
        if len(inside):
            cluster, slot = inside[0]
            raise ValueError(f"document {slot} of cluster {cluster} holds padding before its last token; HED reads "
                             "each document as <s> ... </s>, padded at its end")
        doc_counts = (lengths > 0).sum(axis=1)  # (batch,)
        if (doc_counts == 0).any():
            raise ValueError("every cluster needs at least one document")
        row_of_doc = np.flatnonzero(lengths)  # (n_docs,) the row of every document in (batch * max_docs)
        doc_lengths = lengths.reshape(-1)[row_of_doc]  # (n_docs,)
        self.n_docs, self.n_tokens = len(row_of_doc), int(doc_lengths.sum())
        self.max_docs, self.longest = int(doc_counts.max()), int(doc_lengths.max())

        doc_ids = np.arange(self.n_docs)
        doc_start = np.cumsum(doc_lengths) - doc_lengths  # (n_docs,) packed index of each SOD
        doc_of_token = np.repeat(doc_ids, doc_lengths)  # (n_tokens,)
        # positions restart at 0 in every document (Section 4.1.1, "position restart")
        positions = np.arange(self.n_tokens) - doc_start[doc_of_token]  # (n_tokens,)
        token_in_source = row_of_doc[doc_of_token] * doc_len + positions  # (n_tokens,) index into src_tokens
        cluster_of_doc = row_of_doc // slots  # (n_docs,)
        first_doc = np.cumsum(doc_counts) - doc_counts  # (batch,)
        slot_of_doc = doc_ids - first_doc[cluster_of_doc]  # (n_docs,) index within its cluster
        lengths_by_slot = np.zeros((self.batch_size, self.max_docs), dtype=np.int64)  # (batch, max_docs), 0: none
        lengths_by_slot[cluster_of_doc, slot_of_doc] = doc_lengths
        cluster_tokens = np.zeros(self.batch_size, dtype=np.int64)
        np.add.at(cluster_tokens, cluster_of_doc, doc_lengths)  # (batch,)
        self.cluster_width = int(cluster_tokens.max())  # the tokens of the longest cluster
        cluster_of_token = cluster_of_doc[doc_of_token]  # (n_tokens,)
        cluster_start = np.cumsum(cluster_tokens) - cluster_tokens  # (batch,)
        offset_in_cluster = np.arange(self.n_tokens) - cluster_start[cluster_of_token]  # (n_tokens,)
        starts_by_slot = np.zeros_like(lengths_by_slot)  # (batch, max_docs): each document's first column, 0: none
        starts_by_slot[cluster_of_doc, slot_of_doc] = doc_start - cluster_start[cluster_of_doc]

        groups = length_groups(doc_lengths, doc_start)
        # packed index of every row of the groups' outputs, to put them back in order
        group_tokens = np.concatenate([gather[valid] for _, gather, valid in groups])  # (n_tokens,)
        restore = np.empty_like(group_tokens)
        restore[group_tokens] = np.arange(self.n_tokens)

        kept = [np.nonzero(valid) for _, _, valid in groups]  # (row, column) of every real token of a group
        (token_in_source, self.positions, self.doc_start, self.cluster_of_doc, self.slot_of_doc, self.doc_of_token,
         self.cluster_tokens, self.cluster_of_token, self.offset_in_cluster, self.restore, self.lengths_by_slot,
         self.starts_by_slot, *by_group) = to_device(
            [token_in_source, positions, doc_start, cluster_of_doc, slot_of_doc, doc_of_token, cluster_tokens,
             cluster_of_token, offset_in_cluster, restore, lengths_by_slot, starts_by_slot,
             *(a for (docs, gather, valid), (rows, columns) in zip(groups, kept)
               for a in (docs, gather, valid, rows, columns))], device)
        self.tokens = src_tokens.reshape(-1)[token_in_source]  # (n_tokens,)
        # [(docs (n_g,), gather (n_g, len_g), valid (n_g, len_g), kept)]: ``gather`` indexes the packed
        # tokens (0 where ``valid`` is False), ``kept`` the (row, column) indices of ``valid``'s True
        # entries, in order: every layer selects the real tokens through them
        self.groups = [(docs, gather, valid.bool(), (rows, columns))
                       for docs, gather, valid, rows, columns in zip(*[iter(by_group)] * 5)]

    def within_document_cost(self) -> int:
        """Score entries per head that within-document attention computes: sum over groups
        of n_g x len_g^2 (at most twice sum(document_length^2))."""
        return sum(valid.size(0) * valid.size(1) ** 2 for _, _, valid, _ in self.groups)

    def to_clusters(self, packed: Tensor) -> Tensor:
        """(n_tokens, *rest) packed -> (batch, max_cluster_tokens, *rest), each cluster's
        documents concatenated in order, zero-padded."""
        dense = packed.new_zeros((self.batch_size, self.cluster_width) + tuple(packed.shape[1:]))
        return dense.index_put((self.cluster_of_token, self.offset_in_cluster), packed)

    def document_map(self) -> Tensor:
        """(batch, max_cluster_tokens) long: the document (0, 1, ...) of every token of the
        concatenated clusters, -1 on padding."""
        doc_map = torch.full((self.batch_size, self.cluster_width), -1, dtype=torch.long, device=self.tokens.device)
        return doc_map.index_put((self.cluster_of_token, self.offset_in_cluster), self.slot_of_doc[self.doc_of_token])

    def start_tokens_by_cluster(self, packed: Tensor) -> Tensor:
        """(n_tokens, *rest) -> (batch, max_docs, *rest): every cluster's SOD rows, zero-filled."""
        dense = packed.new_zeros((self.batch_size, self.max_docs) + tuple(packed.shape[1:]))
        return dense.index_put((self.cluster_of_doc, self.slot_of_doc), packed[self.doc_start])

    def shapes(self) -> DocumentShapes:
        """``document_shapes(self.document_map())``, known without asking the device."""
        return DocumentShapes(self.starts_by_slot, self.lengths_by_slot, self.longest)


class EverySlotLayout(DocumentLayout):
    """The layout of a batch's shape alone, for a pass that may read nothing back from the device
    (a training pass captured as a CUDA graph, ``training_capture.py``): every document slot of
    ``src_tokens`` (batch, max_docs, doc_len) is a document of ``doc_len`` tokens, padding
    included, in one length group, and the packed row is ``src_tokens`` flattened.

    Padding takes no part in what the real tokens compute: it is left out of every softmax that
    a real token's row takes (within its document, over the other SODs, in the decoder), and only
    its own rows read it. A padding slot attends to its first token, so that its rows stay finite.
    Documents keep their slots (a padding document between two real ones stays a gap in the
    document map, where ``DocumentLayout`` closes it up), and so the loss and the gradients equal
    the packed layout's, to rounding (``tests/test_training_capture.py``). What the packed layout
    checks on the host (no padding inside a document, a document in every cluster) is not checked."""

    def __init__(self, src_tokens: Tensor, pad: int):
        device = src_tokens.device
        self.batch_size, self.max_docs, self.longest = src_tokens.shape
        self.n_docs, self.cluster_width = self.batch_size * self.max_docs, self.max_docs * self.longest
        self.n_tokens = self.n_docs * self.longest
        self.real = src_tokens.ne(pad)  # (batch, max_docs, doc_len)
        self.tokens = src_tokens.reshape(-1)  # (n_tokens,)
        docs = torch.arange(self.n_docs, device=device)  # (n_docs,)
        columns = torch.arange(self.longest, device=device)  # (doc_len,)
        self.positions = columns.repeat(self.n_docs)  # (n_tokens,): every slot restarts at 0
        self.doc_start = docs * self.longest  # (n_docs,)
        self.cluster_of_doc, self.slot_of_doc = docs // self.max_docs, docs % self.max_docs  # (n_docs,)
        self.lengths_by_slot = self.real.sum(dim=2)  # (batch, max_docs)
        self.starts_by_slot = (torch.arange(self.max_docs, device=device) * self.longest).expand(
            self.batch_size, self.max_docs).masked_fill(self.lengths_by_slot == 0, 0)  # (batch, max_docs)
        self.cluster_tokens = self.lengths_by_slot.sum(dim=1)  # (batch,)
        valid = self.real.view(self.n_docs, self.longest).clone()  # (n_docs, doc_len)
        valid[:, 0] = True  # a real document's SOD; a padding slot's one key, read by its own rows only
        self.restore = None  # the one group's rows are the packed rows
        self.groups = [(docs, None, valid, None)]

    def to_clusters(self, packed: Tensor) -> Tensor:
        """(n_tokens, *rest) -> (batch, max_docs * doc_len, *rest), padding where the slots have it."""
        return packed.view((self.batch_size, self.cluster_width) + tuple(packed.shape[1:]))

    def document_map(self) -> Tensor:
        """(batch, max_docs * doc_len) long: the slot of every real token, -1 on padding."""
        slots = torch.arange(self.max_docs, device=self.tokens.device)[None, :, None]  # (1, max_docs, 1)
        return torch.where(self.real, slots, -1).view(self.batch_size, self.cluster_width)

    def start_tokens_by_cluster(self, packed: Tensor) -> Tensor:
        """(n_tokens, *rest) -> (batch, max_docs, *rest): every slot's first row."""
        return packed.view((self.batch_size, self.max_docs, self.longest) + tuple(packed.shape[1:]))[:, :, 0]


def length_groups(lengths: np.ndarray, starts: np.ndarray) -> List[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Documents grouped by length, on the host: [(docs (n_g,), gather (n_g, len_g), valid
    (n_g, len_g))], ``gather`` indexing the packed tokens (0 where ``valid`` is False). A document
    of n tokens joins group ceil(log_sqrt2(n)), the least g with n^2 <= 2^g, so that the lengths of
    a group differ by less than ``LENGTH_GROUP_RATIO``; computed in integers, with no logarithm to round.

    lengths, starts: (n_docs,) every document's tokens and the packed index of its first."""
    group = np.array([(n * n - 1).bit_length() for n in lengths.tolist()], dtype=np.int64)  # (n_docs,)
    order = np.argsort(group, kind="stable")
    groups = []
    for docs in np.split(order, np.flatnonzero(np.diff(group[order])) + 1):
        offsets = np.arange(lengths[docs].max())  # (len_g,)
        valid = offsets[None, :] < lengths[docs, None]  # (n_g, len_g)
        gather = np.where(valid, starts[docs, None] + offsets[None, :], 0)
        groups.append((docs, gather, valid))
    return groups


def to_device(arrays: List[np.ndarray], device: torch.device) -> List[Tensor]:
    """Integer (or bool) host arrays as int64 tensors on ``device``, views of one buffer copied
    there at once; on CUDA from pinned memory, so that the host goes on without waiting for
    the device (a copy from pageable memory would wait for it)."""
    flat = torch.from_numpy(np.concatenate([a.ravel() for a in arrays], dtype=np.int64))  # (total,), one copy
    if device.type == "cuda":
        flat = flat.pin_memory()
    flat = flat.to(device, non_blocking=True)
    return [piece.view(a.shape) for piece, a in zip(flat.split([a.size for a in arrays]), arrays)]


def attention_dropout(module: MultiheadAttention) -> float:
    dropout = module.dropout_module
    return dropout.p if (module.training or dropout.apply_during_inference) else 0.0


def within_documents(q: Tensor, k: Tensor, v: Tensor, layout: DocumentLayout, dropout_p: float) -> Tuple[Tensor, Tensor]:
    """Every token attends to its own document.

    q, k, v: (n_tokens, heads, head_dim) packed, q already scaled
    returns the outputs (n_tokens, heads, head_dim) and, for the SOD rows, the
    log-sum-exp of their scores (n_docs, heads), fp32.
    """
    outputs, sod_lse = [], q.new_zeros((layout.n_docs, q.size(1)), dtype=torch.float32)
    for docs, gather, valid, kept in layout.groups:
        # (n_g, len_g, heads, head_dim) -> (n_g, heads, len_g, head_dim); no ``gather``: the packed rows as they are
        qg, kg, vg = ((t[gather] if gather is not None else t.view(valid.shape + t.shape[1:])).transpose(1, 2)
                      for t in (q, k, v))
        mask = valid[:, None, None, :]  # (n_g, 1, 1, len_g): keys of the document
        out = F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, dropout_p=dropout_p, scale=1.0)
        out = out.transpose(1, 2)  # (n_g, len_g, heads, head_dim)
        outputs.append(out[kept] if kept is not None else out.flatten(0, 1))  # (tokens of the group, heads, head_dim)
        sod_scores = torch.matmul(qg[:, :, :1], kg.transpose(-1, -2)).squeeze(2).float()  # (n_g, heads, len_g)
        sod_lse = sod_lse.index_copy(0, docs, torch.logsumexp(sod_scores.masked_fill(~mask[:, :, 0], float("-inf")), -1))
    out = torch.cat(outputs) if len(outputs) > 1 else outputs[0]
    return (out[layout.restore] if layout.restore is not None else out), sod_lse


def link_start_tokens(
    q: Tensor, k: Tensor, v: Tensor, out: Tensor, sod_lse: Tensor, layout: DocumentLayout, dropout
) -> Tensor:
    """Merge SOD-to-SOD attention into the SOD rows of ``out`` (one softmax over the union
    of the SOD's document and the other SODs of its cluster).

    q, k, v, out: (n_tokens, heads, head_dim); sod_lse: (n_docs, heads) fp32
    returns ``out`` with its SOD rows replaced.
    """
    qs, ks, vs = (layout.start_tokens_by_cluster(t) for t in (q, k, v))  # (batch, max_docs, heads, head_dim)
    scores = torch.einsum("bqhd,bkhd->bhqk", qs, ks).float()  # (batch, heads, max_docs, max_docs)
    slots = torch.arange(layout.max_docs, device=q.device)
    exists = layout.lengths_by_slot > 0  # (batch, max_docs)
    allowed = exists[:, None, :] & (slots[:, None] != slots[None, :])[None]  # (batch, query, key): other SODs
    linked = allowed.any(dim=2)  # (batch, max_docs): the cluster has another document
    # rows without any other SOD compute on zeros and are then replaced: no NaN, no gradient
    safe = torch.where(linked[:, None, :, None], scores.masked_fill(~allowed[:, None], float("-inf")), 0.0)
    link_lse = torch.where(linked[:, None, :], torch.logsumexp(safe, -1), float("-inf"))  # (batch, heads, max_docs)
    probs = dropout(torch.softmax(safe, -1)).type_as(vs)
    link_out = torch.einsum("bhqk,bkhd->bqhd", probs, vs)  # (batch, max_docs, heads, head_dim)
    link_out = torch.where(linked[:, :, None, None], link_out, 0.0)

    where = (layout.cluster_of_doc, layout.slot_of_doc)
    link_lse = link_lse.transpose(1, 2)[where]  # (n_docs, heads)
    link_out = link_out[where]  # (n_docs, heads, head_dim)
    total = torch.logaddexp(sod_lse, link_lse)  # (n_docs, heads)
    own_share = torch.exp(sod_lse - total).unsqueeze(-1).type_as(out)
    link_share = torch.exp(link_lse - total).unsqueeze(-1).type_as(out)
    merged = own_share * out[layout.doc_start] + link_share * link_out  # (n_docs, heads, head_dim)
    return out.index_copy(0, layout.doc_start, merged)


class DocumentSelfAttention(MultiheadAttention):
    """Encoder self-attention of Section 4.1 on packed tokens. BART's projections, so
    BART's weights load unchanged.

    Called by fairseq's encoder layer as ``self_attn(query=x, key=x, value=x,
    key_padding_mask=layout, ...)``: x is (n_tokens, 1, dim), every token of the batch in
    one packed row, and the layout stands where a padding mask would.
    """

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[DocumentLayout] = None, incremental_state=None, need_weights: bool = False,
                static_kv: bool = False, attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        layout = key_padding_mask
        if not isinstance(layout, DocumentLayout):
            raise TypeError("HED's encoder self-attention needs the DocumentLayout of its batch")
        if incremental_state is not None or attn_mask is not None or before_softmax or need_weights:
            raise NotImplementedError("HED's encoder self-attention takes packed tokens and a layout only")
        n_tokens, _, dim = query.shape  # (n_tokens, 1, dim)
        x = query.view(n_tokens, dim)
        heads, head_dim = self.num_heads, self.head_dim
        q = (self.q_proj(x) * self.scaling).view(n_tokens, heads, head_dim)
        k = self.k_proj(x).view(n_tokens, heads, head_dim)
        v = self.v_proj(x).view(n_tokens, heads, head_dim)

        out, sod_lse = within_documents(q, k, v, layout, attention_dropout(self))
        if layout.max_docs > 1:
            out = link_start_tokens(q, k, v, out, sod_lse, layout, self.dropout_module)
        return self.out_proj(out.reshape(n_tokens, 1, dim)), None


# --------------------------------------------------------------------------- decoder


def hierarchical_softmax(scores: Tensor, document_map: Tensor, starts: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
    """Eq. 3-5 for many queries at once.

    scores:        (batch, queries, src_len) cross-attention scores a
    document_map:  (batch, src_len) document of every key, -1 on padding; each document's
                   keys contiguous, starting with its SOD token
    starts, lengths: (batch, max_docs) where each document starts and its tokens, 0 where a
                   cluster has fewer (``document_shapes``)
    returns the key weights s_n w_{n,k} (batch, queries, src_len), 0 on padding, and the
    document weights s (batch, queries, max_docs), 0 on missing documents; both fp32.
    """
    batch, n_queries, src_len = scores.shape
    exists = lengths > 0  # (batch, max_docs)
    index = document_map.clamp(min=0).unsqueeze(1).expand(batch, n_queries, src_len)
    a = scores.float().masked_fill(document_map.lt(0).unsqueeze(1), float("-inf"))

    # log sum_{k in n} exp(a_k) per document, stabilised by the document's own maximum
    peak = a.new_full((batch, n_queries, lengths.size(1)), float("-inf"))
    peak = peak.scatter_reduce(2, index, a.detach(), "amax").masked_fill(~exists.unsqueeze(1), 0.0)
    members = (document_map.unsqueeze(-1) == torch.arange(lengths.size(1), device=a.device)).to(a.dtype)
    within = torch.bmm(torch.exp(a - peak.gather(2, index)), members)  # (batch, queries, max_docs)
    document_lse = peak + torch.log(within.masked_fill(~exists.unsqueeze(1), 1.0))

    sod_scores = a.gather(2, starts.unsqueeze(1).expand(batch, n_queries, lengths.size(1)))
    log_s = torch.log_softmax(sod_scores.masked_fill(~exists.unsqueeze(1), float("-inf")), dim=-1)  # Eq. 4
    offset = log_s - document_lse  # (batch, queries, max_docs): c_n
    weights = torch.softmax(a + offset.gather(2, index), dim=-1)  # Eq. 3 and 5 in one softmax
    return weights, log_s.exp()


def document_shapes(document_map: Tensor) -> DocumentShapes:
    """The ``DocumentShapes`` of a document map, read back from the device once, in one list, for
    every cross-attention of a decoder (``HEDDecoder``)."""
    batch, src_len = document_map.shape
    # column d + 1: document d, for as many documents as a source could hold (column 0: padding)
    columns = torch.arange(src_len, device=document_map.device).expand(batch, src_len)
    counts = torch.zeros(batch, src_len + 1, dtype=torch.long, device=document_map.device).scatter_add_(
        1, document_map + 1, torch.ones_like(document_map))
    firsts = torch.full((batch, src_len + 1), src_len, device=document_map.device).scatter_reduce_(
        1, document_map + 1, columns, "amin")
    docs, longest = torch.stack([document_map.max() + 1, counts[:, 1:].max()]).tolist()
    lengths = counts[:, 1: 1 + docs]
    return DocumentShapes(firsts[:, 1: 1 + docs].masked_fill(lengths == 0, 0), lengths, longest)


def by_document(k: Tensor, v: Tensor, shapes: DocumentShapes) -> Dict[str, Tensor]:
    """Keys and values (clusters, heads, src_len, head_dim), each document's keys contiguous
    where ``shapes`` puts them, laid out per document: (clusters, max_docs, heads, doc_len,
    head_dim), and which of their keys are real, (clusters, max_docs, doc_len). A missing
    document (length 0) reads its cluster's first key, so that its attention is finite: its
    document weight is exactly 0."""
    clusters, heads, src_len, head_dim = k.shape
    starts, lengths, doc_len = shapes
    docs = lengths.size(1)
    slot = torch.arange(doc_len, device=k.device)  # (doc_len,)
    allowed = slot < lengths[:, :, None]  # (clusters, max_docs, doc_len)
    allowed[:, :, 0] = True  # a missing document's one key (see above); a real one's SOD
    positions = (starts[:, :, None] + slot).clamp(max=src_len - 1).masked_fill(~allowed, 0)
    index = positions.view(clusters, 1, docs * doc_len, 1).expand(clusters, heads, docs * doc_len, head_dim)

    def lay_out(x: Tensor) -> Tensor:  # contiguous, so that each step reads it as a view, with no copy
        return x.gather(2, index).view(clusters, heads, docs, doc_len, head_dim).transpose(1, 2).contiguous()

    return {"document_keys": lay_out(k), "document_values": lay_out(v), "document_allowed": allowed}


class HierarchicalCrossAttention(MultiheadAttention):
    """Decoder cross-attention of Eq. 3-5, in every head. BART's projections unchanged.

    key_padding_mask is the encoder's document map (batch, src_len). The returned
    attention weights are the *document* weights s (Eq. 4): (rows, tgt_len, max_docs)
    averaged over heads, or (heads, rows, tgt_len, max_docs) with ``need_head_weights``.

    Eq. 5's output is sum_n s_n softmax_{k in n}(a_k) V_k: one attention per document,
    mixed by the document weights. So each document's attention runs through SDPA (keys
    and values laid out per document, (clusters, max_docs, heads, doc_len, head_dim)),
    with no score matrix over the whole source, and s comes from the SOD keys' scores
    alone (the dense scores and ``hierarchical_softmax`` compute the same: tested).

    Incremental decoding caches the projected keys and values with the document layout,
    one copy per cluster. When the queries hold several beams per cluster (rows = clusters
    x beam, which fairseq's beam search arranges through ``set_beam_size``), the beams
    share that copy; reordering keeps whole clusters.

    ``known_shapes``: (document map, its ``document_shapes``), set by the decoder for the length
    of a forward pass, so that its layers do not each read the document lengths back.
    """

    known_shapes: Optional[Tuple[Tensor, DocumentShapes]] = None

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None, need_weights: bool = True,
                static_kv: bool = False, attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        if attn_mask is not None or before_softmax:
            raise NotImplementedError("HED's cross-attention takes no attention mask")
        tgt_len, rows, dim = query.shape
        heads, head_dim = self.num_heads, self.head_dim
        saved = self._get_input_buffer(incremental_state) if incremental_state is not None else {}
        if "document_map" not in saved:  # the first step of this source, or a full pass
            if key is None or key_padding_mask is None:
                raise ValueError("HED's cross-attention needs the encoder states and their document map")
            saved = self._memory(key, value, key_padding_mask, beam=rows // key.size(1))
            if incremental_state is not None:
                self._set_input_buffer(incremental_state, saved)
        clusters = saved["document_map"].size(0)
        beam = rows // clusters  # query rows per cluster: example-major (cluster, beam)

        q = self.q_proj(query) * self.scaling  # (tgt_len, rows, dim)
        # (tgt_len, clusters, beam, heads, head_dim) -> (clusters, heads, beam * tgt_len, head_dim)
        q = q.view(tgt_len, clusters, beam, heads, head_dim).permute(1, 3, 2, 0, 4).reshape(
            clusters, heads, beam * tgt_len, head_dim)
        out, doc_weights = self._attend(q, saved)
        # out: (clusters, heads, beam * tgt_len, head_dim); doc_weights: (clusters, heads, beam * tgt_len, max_docs)
        out = out.view(clusters, heads, beam, tgt_len, head_dim).permute(3, 0, 2, 1, 4).reshape(tgt_len, rows, dim)
        out = self.out_proj(out)

        if not (need_weights or need_head_weights):
            return out, None
        # (clusters, heads, beam, tgt_len, docs) -> (heads, rows, tgt_len, docs)
        doc_weights = doc_weights.reshape(clusters, heads, beam, tgt_len, -1).permute(1, 0, 2, 3, 4).reshape(
            heads, rows, tgt_len, -1)
        return out, doc_weights if need_head_weights else doc_weights.mean(dim=0)

    def _memory(self, key: Tensor, value: Tensor, document_map: Tensor, beam: int) -> Dict:
        """What the queries of a source attend to, computed once per source: key, value
        (src_len, clusters, dim); document_map (clusters, src_len). ``beam``: a Python int, so
        that reordering reads nothing back from the device."""
        src_len, clusters, _ = key.shape
        k = self.k_proj(key).view(src_len, clusters, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        v = self.v_proj(value).view(src_len, clusters, self.num_heads, self.head_dim).permute(1, 2, 0, 3)
        # k, v: (clusters, heads, src_len, head_dim)
        known = self.known_shapes
        shapes = known[1] if known is not None and known[0] is document_map else document_shapes(document_map)
        saved = {"document_map": document_map, "document_lengths": shapes.lengths, "beam": beam}
        return {**saved, **by_document(k, v, shapes)}

    def _attend(self, q: Tensor, saved: Dict) -> Tuple[Tensor, Tensor]:
        """Eq. 5 as sum_n s_n (softmax within document n) V_n, each document's attention
        through SDPA. q: (clusters, heads, queries, head_dim), scaled."""
        k, v, allowed = saved["document_keys"], saved["document_values"], saved["document_allowed"]
        clusters, docs, heads, doc_len, head_dim = k.shape
        queries = q.size(2)
        # every document of a cluster with the cluster's queries: (clusters * docs, heads, queries, head_dim)
        q_docs = q.unsqueeze(1).expand(clusters, docs, heads, queries, head_dim).reshape(-1, heads, queries, head_dim)
        within = F.scaled_dot_product_attention(
            q_docs, k.reshape(-1, heads, doc_len, head_dim), v.reshape(-1, heads, doc_len, head_dim),
            attn_mask=allowed.reshape(-1, 1, 1, doc_len), dropout_p=attention_dropout(self), scale=1.0,
        ).view(clusters, docs, heads, queries, head_dim)
        # Eq. 4: the documents' weights from their SOD tokens' scores (each document's first key)
        sod_scores = torch.einsum("chqd,cnhd->chqn", q, k[:, :, :, 0])  # (clusters, heads, queries, docs)
        missing = (saved["document_lengths"] == 0)[:, None, None, :]  # (clusters, 1, 1, docs)
        doc_weights = torch.softmax(sod_scores.float().masked_fill(missing, float("-inf")), dim=-1)
        out = torch.einsum("chqn,cnhqd->chqd", doc_weights.to(within.dtype), within)
        return out, doc_weights

    def token_weights(self, query: Tensor, key: Tensor, document_map: Tensor) -> Tuple[Tensor, Tensor]:
        """For analysis: the key weights (heads, rows, tgt_len, src_len) and document weights
        (heads, rows, tgt_len, max_docs) of a full (non-incremental) call, one row per cluster."""
        tgt_len, rows, _ = query.shape
        heads, head_dim = self.num_heads, self.head_dim
        q = (self.q_proj(query) * self.scaling).view(tgt_len, rows, heads, head_dim).permute(1, 2, 0, 3)
        k = self.k_proj(key).view(key.size(0), rows, heads, head_dim).permute(1, 2, 0, 3)
        scores = torch.matmul(q, k.transpose(-1, -2)).reshape(rows, heads * tgt_len, -1)
        starts, lengths, _ = document_shapes(document_map)
        weights, doc_weights = hierarchical_softmax(scores, document_map, starts, lengths)
        return (weights.view(rows, heads, tgt_len, -1).transpose(0, 1),
                doc_weights.view(rows, heads, tgt_len, -1).transpose(0, 1))

    @torch.jit.export
    def reorder_incremental_state(
        self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], new_order: Tensor
    ):
        """new_order indexes query rows (cluster x beam); the cache holds one entry per
        cluster, so it follows the cluster of each beam group. Unchanged clusters: no copy."""
        saved = self._get_input_buffer(incremental_state)
        if "document_map" not in saved:
            return incremental_state
        clusters = saved["document_map"].size(0)
        beam = saved["beam"]
        if clusters * beam == new_order.numel():  # beams move within their clusters only
            return incremental_state
        cluster_order = new_order.view(-1, beam)[:, 0] // beam
        for name, value in saved.items():
            if isinstance(value, Tensor):
                saved[name] = value.index_select(0, cluster_order)
        return self._set_input_buffer(incremental_state, saved)
