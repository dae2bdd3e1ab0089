"""Efficient encoder self-attentions (Huang et al., NAACL 2021, Section 2) on BART's weights.

Every variant is a fairseq ``MultiheadAttention`` that keeps BART's query, key, value and
output projections, so a BART checkpoint loads into it unchanged (Table 1: none of them
adds parameters), and changes only which keys each query sees:

* ``SlidingWindowAttention`` (2.1): query ``i`` sees keys ``|i - j| <= w/2``; optionally the
  first ``g`` tokens are global (every query sees them and they see every key: the pattern
  is symmetric) and a stride ``s`` adds the keys ``(i - j) mod s == 0``.
  Memory O(n w), plus O(2 n g) and O(n^2 / s).
* ``LSHAttention`` (2.3, Kitaev et al. 2020): ``l`` rounds of random-rotation hashing put
  similar queries and keys into the same buckets; each position is hashed once (from one
  vector shared by its query and key), positions are sorted by bucket and cut into chunks of
  ``b_l``, and each query attends to the keys of its chunk and of the chunk before, so a
  query meets the keys of its own bucket. O(l n b_l).
* ``SinkhornAttention`` (2.3, Tay et al. 2020): the sequence is cut into blocks of ``b_s``; a
  Sinkhorn sorting network turns block-to-block scores into a (soft) permutation of the
  blocks, and each query attends to its own block and to the block sorted next to it.
  O(2 n b_s).

The attention functions work on per-head tensors ``(batch, heads, len, head_dim)``, queries
already scaled by ``1 / sqrt(head_dim)``, with a key padding mask ``(batch, len)`` that is
True at padding. Softmaxes run in fp32, and a query with nothing to attend to gets an
all-zero output instead of NaN.
"""

import math
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor

from ...errors import SettingError

MASKED_SCORE = torch.finfo(torch.float32).min  # finite, so that an all-masked row gives no NaN


def masked_softmax(scores: Tensor, masked: Tensor) -> Tensor:
    """fp32 softmax over the last dimension that gives masked entries exactly 0 weight;
    a row whose entries are all masked gets all-zero weights."""
    probs = torch.softmax(scores.float().masked_fill(masked, MASKED_SCORE), dim=-1)
    return probs.masked_fill(masked, 0.0)


def fused_masked_attention(q: Tensor, k: Tensor, v: Tensor, masked: Tensor, dropout: Callable[[Tensor], Tensor]) -> Tensor:
    """softmax(q k^T) v over the unmasked keys through SDPA, without a score matrix, equal to
    ``masked_softmax``'s: a query whose every key is masked gets zero output. q is scaled.

    q: (*batch, queries, head_dim); k, v: (*batch, keys, head_dim); masked: broadcastable to
    (*batch, queries, keys), True where a key may not be attended."""
    bias = torch.zeros(masked.shape, dtype=q.dtype, device=q.device).masked_fill(masked, torch.finfo(q.dtype).min)
    p = getattr(dropout, "p", 0.0)
    active = getattr(dropout, "training", False) or getattr(dropout, "apply_during_inference", False)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=p if active else 0.0, scale=1.0)
    return out * (~masked).any(dim=-1, keepdim=True).to(out.dtype)


def padding_mask(key_padding_mask: Optional[Tensor], batch: int, length: int, padded_length: int, device) -> Tensor:
    """(batch, padded_length) bool: the input's padding, then True for the extra positions."""
    if key_padding_mask is None:
        mask = torch.zeros(batch, length, dtype=torch.bool, device=device)
    else:
        mask = key_padding_mask.to(device=device, dtype=torch.bool)
    return F.pad(mask, (0, padded_length - length), value=True)


def pad_length(x: Tensor, padded_length: int) -> Tensor:
    """(batch, heads, len, head_dim) -> (batch, heads, padded_length, head_dim), zeros appended."""
    return F.pad(x, (0, 0, 0, padded_length - x.size(2)))


def round_up(length: int, unit: int) -> int:
    return -(-length // unit) * unit


# ---- sliding window (+ global tokens, + stride) -------------------------------------------


def sliding_window_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Optional[Tensor],
    half_window: int,
    global_tokens: int = 0,
    stride: int = 0,
    dropout: Callable[[Tensor], Tensor] = lambda p: p,
    fused: bool = True,
) -> Tensor:
    """Query ``i`` attends, in one softmax, to the union of
    ``{j : |i - j| <= half_window}``, the first ``global_tokens`` keys, and, with ``stride``,
    ``{j : (i - j) mod stride == 0}``; the first ``global_tokens`` queries attend to every key.

    q, k, v: (batch, heads, len, head_dim); returns (batch, heads, len, head_dim). A window
    alone (no global or strided tokens) is one SDPA call per block (``fused``).
    """
    batch, heads, length, head_dim = q.shape
    block = half_window  # blocks of w/2 queries: every key a query may see lies in its block or a neighbour
    unit = math.lcm(block, stride) if stride else block
    padded = round_up(length, unit)
    padding = padding_mask(key_padding_mask, batch, length, padded, q.device)  # (batch, padded)
    q, k, v = (pad_length(x, padded) for x in (q, k, v))
    positions = torch.arange(padded, device=q.device)
    n_globals = min(global_tokens, length)

    scores, masks = [], []  # every key set of every query, joined into one softmax
    # the window: the keys of blocks n-1, n and n+1 for the queries of block n
    n_blocks = padded // block
    q_blocks = q.view(batch, heads, n_blocks, block, head_dim)
    k_windows = F.pad(k, (0, 0, block, block)).unfold(2, 3 * block, block).transpose(-1, -2)
    v_windows = F.pad(v, (0, 0, block, block)).unfold(2, 3 * block, block).transpose(-1, -2)
    # k_windows, v_windows: (batch, heads, n_blocks, 3 * block, head_dim)
    distance = torch.arange(3 * block, device=q.device)[None, :] - block - torch.arange(block, device=q.device)[:, None]
    outside = distance.abs() > half_window  # (block, 3 * block): j - i of every (query, window key) pair
    window_padding = F.pad(padding, (block, block), value=True).unfold(1, 3 * block, block)  # (batch, n_blocks, 3 * block)
    window_masked = outside[None, None] | window_padding[:, :, None, :]  # (batch, n_blocks, block, 3 * block)
    if fused and not n_globals and not stride:
        out = fused_masked_attention(q_blocks, k_windows, v_windows, window_masked[:, None], dropout)
        return out.reshape(batch, heads, padded, head_dim)[:, :, :length]
    window_scores = torch.einsum("bhnqd,bhnkd->bhnqk", q_blocks, k_windows)  # (batch, heads, n_blocks, block, 3 * block)
    scores.append(window_scores.reshape(batch, heads, padded, 3 * block))
    masks.append(window_masked.reshape(batch, 1, padded, 3 * block))

    if n_globals:  # every query also sees the first g tokens (unless its window already has them)
        global_scores = torch.einsum("bhqd,bhkd->bhqk", q, k[:, :, :n_globals])  # (batch, heads, padded, g)
        in_window = (positions[:, None] - positions[None, :n_globals]).abs() <= half_window  # (padded, g)
        scores.append(global_scores)
        masks.append((in_window[None] | padding[:, None, :n_globals])[:, None])  # (batch, 1, padded, g)

    if stride:  # and every stride-th token: queries and keys grouped by their position mod stride
        rows = padded // stride
        q_strided = q.view(batch, heads, rows, stride, head_dim)
        k_strided = k.view(batch, heads, rows, stride, head_dim)
        v_strided = v.view(batch, heads, rows, stride, head_dim)
        stride_scores = torch.einsum("bhard,bhcrd->bharc", q_strided, k_strided)  # (batch, heads, rows, stride, rows)
        key_position = torch.arange(rows, device=q.device)[None, :] * stride + (positions % stride)[:, None]  # (padded, rows)
        seen = ((positions[:, None] - key_position).abs() <= half_window) | (key_position < n_globals)
        scores.append(stride_scores.reshape(batch, heads, padded, rows))
        masks.append((seen[None] | padding[:, key_position])[:, None])  # (batch, 1, padded, rows)

    widths = [s.size(-1) for s in scores]
    probs = masked_softmax(torch.cat(scores, dim=-1), torch.cat(masks, dim=-1))  # (batch, heads, padded, sum(widths))
    parts = dropout(probs).type_as(v).split(widths, dim=-1)
    out = torch.einsum("bhnqk,bhnkd->bhnqd", parts[0].reshape(batch, heads, n_blocks, block, 3 * block), v_windows)
    out = out.reshape(batch, heads, padded, head_dim)
    if n_globals:
        out = out + torch.einsum("bhqk,bhkd->bhqd", parts[1], v[:, :, :n_globals])
    if stride:
        strided = torch.einsum("bharc,bhcrd->bhard", parts[-1].reshape(batch, heads, rows, stride, rows), v_strided)
        out = out + strided.reshape(batch, heads, padded, head_dim)
    if n_globals:  # global queries see every key
        global_rows = torch.einsum("bhqd,bhkd->bhqk", q[:, :, :n_globals], k)  # (batch, heads, g, padded)
        global_probs = dropout(masked_softmax(global_rows, padding[:, None, None, :])).type_as(v)
        out = torch.cat([torch.einsum("bhqk,bhkd->bhqd", global_probs, v), out[:, :, n_globals:]], dim=2)
    return out[:, :, :length]


# ---- LSH -------------------------------------------------------------------------------------


def lsh_buckets(x: Tensor, rotations: Tensor) -> Tensor:
    """Angular LSH: bucket = argmax([x R ; -x R]) for each round's random rotation R.

    x: (batch, heads, len, head_dim); rotations: (heads, head_dim, rounds, n_buckets / 2)
    returns (batch, heads, rounds, len) bucket ids in [0, n_buckets).
    """
    rotated = torch.einsum("bhtd,hdrk->bhrtk", x, rotations.to(x.dtype))
    return torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)


def lsh_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Optional[Tensor],
    buckets: Tensor,
    chunk_size: int,
    dropout: Callable[[Tensor], Tensor] = lambda p: p,
) -> Tensor:
    """Reformer's chunked attention over one bucket id per position and round.

    Each round sorts the positions by (bucket, position), and queries, keys and values all
    follow that one order (Kitaev et al. 2020, Section 2: "sort the queries and keys by
    bucket"; with one hash per position the i-th query and the i-th key of the sorted
    sequence are the same position). The sorted sequence is cut into chunks of
    ``chunk_size``, and the queries of chunk ``c`` attend to the keys of chunks ``c`` and
    ``c - 1`` (the first chunk has no chunk before it). A bucket of at most ``chunk_size``
    positions lies in one chunk or in two adjacent ones, so each of its queries sees every key
    of the bucket sorted at or before it (itself included), and all of them when the bucket
    lies in one chunk. Padding sorts after
    every bucket and is never attended to. Rounds are combined as parts of one softmax: round
    ``r``'s output weighs ``exp(lse_r - logsumexp_r(lse_r))``, its share of the total mass,
    which is softmax(q k^T) over the union of the rounds' keys, a key counted once per round
    that shows it to the query.

    q, k, v: (batch, heads, len, head_dim); buckets: (batch, heads, rounds, len) integer
    bucket ids (its values at padding are ignored); returns (batch, heads, len, head_dim).
    """
    batch, heads, length, head_dim = q.shape
    rounds = buckets.size(2)
    padded = round_up(length, chunk_size)
    n_chunks = padded // chunk_size
    padding = padding_mask(key_padding_mask, batch, length, padded, q.device)  # (batch, padded)
    q, k, v = (pad_length(x, padded) for x in (q, k, v))

    with torch.no_grad():  # positions sorted by (bucket, position), padding last: (batch, heads, rounds, padded)
        sort_keys = F.pad(buckets.to(device=q.device, dtype=torch.long), (0, padded - length))
        sort_keys = sort_keys.masked_fill(padding[:, None, None, :], torch.iinfo(torch.long).max)
        order = torch.sort(sort_keys, dim=-1, stable=True).indices

    def by_order(x: Tensor) -> Tensor:  # (batch, heads, padded, d) -> (batch, heads, rounds, n_chunks, chunk, d)
        expanded = x[:, :, None].expand(-1, -1, rounds, -1, -1)
        gathered = expanded.gather(3, order[..., None].expand(-1, -1, -1, -1, x.size(-1)))
        return gathered.view(batch, heads, rounds, n_chunks, chunk_size, x.size(-1))

    q_sorted, k_sorted, v_sorted = by_order(q), by_order(k), by_order(v)
    key_masked = padding[:, None, None, :].expand(-1, heads, rounds, -1).gather(3, order)
    key_masked = key_masked.view(batch, heads, rounds, n_chunks, chunk_size)
    if n_chunks > 1:  # each chunk also sees the chunk before it (the first chunk has none)
        k_sorted = torch.cat([k_sorted, look_back(k_sorted, 0.0)], dim=4)
        v_sorted = torch.cat([v_sorted, look_back(v_sorted, 0.0)], dim=4)
        key_masked = torch.cat([key_masked, look_back(key_masked, True)], dim=4)
    # k_sorted, v_sorted: (batch, heads, rounds, n_chunks, keys, head_dim), keys = chunk_size or 2 * chunk_size

    scores = torch.einsum("bhrncd,bhrnkd->bhrnck", q_sorted, k_sorted).float()  # (batch, heads, rounds, n_chunks, chunk, keys)
    masked = key_masked[:, :, :, :, None, :]
    filled = scores.masked_fill(masked, MASKED_SCORE)
    lse = torch.logsumexp(filled, dim=-1)  # (batch, heads, rounds, n_chunks, chunk)
    probs = torch.exp(filled - lse[..., None]).masked_fill(masked, 0.0)
    out = torch.einsum("bhrnck,bhrnkd->bhrncd", dropout(probs).type_as(v), v_sorted)  # (batch, heads, rounds, n_chunks, chunk, d)

    undo = order.argsort(dim=-1)  # back to positions: (batch, heads, rounds, padded)
    out = out.reshape(batch, heads, rounds, padded, head_dim).gather(3, undo[..., None].expand(-1, -1, -1, -1, head_dim))
    lse = lse.reshape(batch, heads, rounds, padded).gather(3, undo)
    round_weights = torch.softmax(lse, dim=2).type_as(out)  # (batch, heads, rounds, padded)
    out = (out * round_weights[..., None]).sum(dim=2)  # (batch, heads, padded, head_dim)
    return out[:, :, :length]


def look_back(chunks: Tensor, fill) -> Tensor:
    """(batch, heads, rounds, n_chunks, chunk, ...) -> the previous chunk of every chunk, ``fill`` for the first."""
    first = torch.full_like(chunks[:, :, :, :1], fill)
    return torch.cat([first, chunks[:, :, :, :-1]], dim=3)


# ---- Sinkhorn ----------------------------------------------------------------------------------


def sinkhorn(log_scores: Tensor, valid: Tensor, iterations: int) -> Tensor:
    """Sinkhorn normalisation in log space: rows and columns of the valid entries are
    normalised in turn, ``iterations`` times; invalid entries (blocks of padding) get 0.

    log_scores: (..., n, n); valid: bool, broadcastable; returns (..., n, n) in fp32, doubly
    stochastic on the valid rows and columns."""
    invalid = ~valid
    x = log_scores.float().masked_fill(invalid, MASKED_SCORE)
    for _ in range(iterations):
        x = (x - torch.logsumexp(x, dim=-1, keepdim=True)).masked_fill(invalid, MASKED_SCORE)
        x = (x - torch.logsumexp(x, dim=-2, keepdim=True)).masked_fill(invalid, MASKED_SCORE)
    return torch.exp(x).masked_fill(invalid, 0.0)


SORT_EPS = 1e-6  # log(relu(R) + eps): a block pair whose score is not positive gets log(eps)


def gumbel_noise(like: Tensor, eps: float = 1e-6) -> Tensor:
    uniform = torch.rand_like(like).clamp(eps, 1.0 - eps)
    return -torch.log(-torch.log(uniform))


def sinkhorn_block_sort(q_blocks: Tensor, k_blocks: Tensor, real_blocks: Tensor, iterations: int,
                        temperature: float, noise: bool) -> Tensor:
    """The sorting network: the soft permutation that places block ``j`` next to block ``i``,
    as the HEPOS authors compute it (LongDocSum, ``utils/sinkhorn.py``, ``AttentionSortNet``
    and ``gumbel_sinkhorn``):

        R_ij = mean(q_i) . mean(k_j)                      q scaled by 1 / sqrt(head_dim)
        P    = Sinkhorn((log(relu(R) + eps) + G) / temperature)

    The means are over a block's real tokens; ``G`` is Gumbel noise, drawn when ``noise``
    (training only). Sinkhorn normalisation runs over the blocks that hold any real token.

    q_blocks, k_blocks: (batch, heads, n_blocks, block, head_dim); real_blocks: (batch, 1, n_blocks, block)
    returns (batch, heads, n_blocks, n_blocks) in fp32.
    """
    real = real_blocks.to(q_blocks.dtype)[..., None]  # (batch, 1, n_blocks, block, 1)
    counts = real.sum(dim=3).clamp_min(1.0)  # (batch, 1, n_blocks, 1)
    q_summary = (q_blocks * real).sum(dim=3) / counts  # (batch, heads, n_blocks, head_dim)
    k_summary = (k_blocks * real).sum(dim=3) / counts
    block_scores = torch.einsum("bhid,bhjd->bhij", q_summary, k_summary).float()  # (batch, heads, n_blocks, n_blocks)
    log_scores = torch.log(F.relu(block_scores) + SORT_EPS)
    if noise:
        log_scores = log_scores + gumbel_noise(log_scores)
    has_real = real_blocks.any(dim=-1)  # (batch, 1, n_blocks)
    valid = has_real[..., :, None] & has_real[..., None, :]
    return sinkhorn(log_scores / temperature, valid, iterations)


def sinkhorn_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_padding_mask: Optional[Tensor],
    block_size: int,
    iterations: int,
    temperature: float,
    noise: bool,
    dropout: Callable[[Tensor], Tensor] = lambda p: p,
    block_sort: Optional[Tensor] = None,
    fused: bool = True,
) -> Tensor:
    """Each block of ``block_size`` queries attends to its own block's keys and to the keys of
    its sorted block ``sum_j R_ij K_j`` (R: the sorting network's soft permutation, or
    ``block_sort`` if given). A sorted key slot holding no real key is masked.

    q, k, v: (batch, heads, len, head_dim); returns (batch, heads, len, head_dim).
    """
    batch, heads, length, head_dim = q.shape
    padded = round_up(length, block_size)
    n_blocks = padded // block_size
    padding = padding_mask(key_padding_mask, batch, length, padded, q.device)  # (batch, padded)
    q, k, v = (pad_length(x, padded) for x in (q, k, v))
    blocked = (batch, heads, n_blocks, block_size, head_dim)
    q_blocks, k_blocks, v_blocks = q.view(blocked), k.view(blocked), v.view(blocked)
    real_blocks = (~padding).view(batch, 1, n_blocks, block_size)

    if block_sort is None:
        block_sort = sinkhorn_block_sort(q_blocks, k_blocks, real_blocks, iterations, temperature, noise)
    sort = block_sort.type_as(k)  # (batch, heads, n_blocks, n_blocks)
    real = real_blocks.to(k.dtype)[..., None]  # padding keys and values do not enter the mixture
    k_sorted = torch.einsum("bhij,bhjtd->bhitd", sort, k_blocks * real)  # (batch, heads, n_blocks, block, head_dim)
    v_sorted = torch.einsum("bhij,bhjtd->bhitd", sort, v_blocks * real)
    sorted_real = torch.einsum("bhij,bjt->bhit", block_sort.float(), real_blocks[:, 0].float())  # (batch, heads, n_blocks, block)

    keys = torch.cat([k_blocks, k_sorted], dim=3)  # (batch, heads, n_blocks, 2 * block, head_dim)
    values = torch.cat([v_blocks, v_sorted], dim=3)
    own_masked = padding.view(batch, 1, n_blocks, block_size).expand(-1, heads, -1, -1)
    masked = torch.cat([own_masked, sorted_real <= 0], dim=-1)  # (batch, heads, n_blocks, 2 * block)
    if fused:
        out = fused_masked_attention(q_blocks, keys, values, masked[:, :, :, None, :], dropout)
        return out.reshape(batch, heads, padded, head_dim)[:, :, :length]
    scores = torch.einsum("bhnqd,bhnkd->bhnqk", q_blocks, keys)  # (batch, heads, n_blocks, block, 2 * block)
    probs = dropout(masked_softmax(scores, masked[:, :, :, None, :])).type_as(v)
    out = torch.einsum("bhnqk,bhnkd->bhnqd", probs, values).reshape(batch, heads, padded, head_dim)
    return out[:, :, :length]


# ---- modules ------------------------------------------------------------------------------------


class EfficientSelfAttention(MultiheadAttention):
    """BART's self-attention projections around a sparse attention pattern (``attend``)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, q_noise: float = 0.0, qn_block_size: int = 8):
        super().__init__(embed_dim, num_heads, dropout=dropout, self_attention=True, q_noise=q_noise,
                         qn_block_size=qn_block_size)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Optional[Tensor]) -> Tensor:
        raise NotImplementedError

    def forward(self, query: Tensor, key: Optional[Tensor], value: Optional[Tensor],
                key_padding_mask: Optional[Tensor] = None,
                incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None, need_weights: bool = False,
                static_kv: bool = False, attn_mask: Optional[Tensor] = None, before_softmax: bool = False,
                need_head_weights: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
        """query: (len, batch, embed_dim), the encoder's states; returns (len, batch, embed_dim)
        and no attention weights (the pattern has no dense weight matrix)."""
        if attn_mask is not None or incremental_state is not None:
            raise ValueError(f"{type(self).__name__} is an encoder self-attention: no attention mask, no incremental state")
        length, batch, _ = query.shape

        def per_head(x: Tensor) -> Tensor:  # (len, batch, embed_dim) -> (batch, heads, len, head_dim)
            return x.view(length, batch, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

        q = per_head(self.q_proj(query) * self.scaling)
        k = per_head(self.k_proj(query))
        v = per_head(self.v_proj(query))
        out = self.attend(q, k, v, key_padding_mask)  # (batch, heads, len, head_dim)
        out = out.permute(2, 0, 1, 3).reshape(length, batch, self.embed_dim)
        return self.out_proj(out), None


class SlidingWindowAttention(EfficientSelfAttention):
    """Section 2.1: a window of ``window_size`` (w/2 keys on each side), optionally with
    ``global_tokens`` leading global tokens and a ``stride``."""

    def __init__(self, embed_dim, num_heads, window_size: int = 256, global_tokens: int = 0, stride: int = 0, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if window_size < 2:
            raise SettingError(f"the window must hold at least one key on each side, got --window-size {window_size}")
        if global_tokens < 0 or stride < 0:
            raise SettingError("--global-tokens and --window-stride must be >= 0")
        self.half_window = window_size // 2
        self.global_tokens = global_tokens
        self.stride = stride

    def attend(self, q, k, v, key_padding_mask):
        return sliding_window_attention(q, k, v, key_padding_mask, self.half_window, self.global_tokens, self.stride,
                                        self.dropout_module)


class LSHAttention(EfficientSelfAttention):
    """Section 2.3: ``rounds`` rounds of hashing into ``n_buckets`` buckets, chunks of ``bucket_size``.

    Each position is hashed ONCE per round, from the one vector its query and key share:
    ``(q_proj(x) + k_proj(x)) / 2``, the vector the HEPOS authors hash (LongDocSum,
    ``Model/longbart/utils/lsh_attention.py``, ``LSHSelfAttention.forward`` and
    ``_hash_vectors``). Queries, keys and values are then sorted by that one bucket id, so, as
    in Reformer's shared-QK attention (Kitaev et al. 2020, Section 2), the query and the keys
    of a bucket line up in the same or adjacent chunks. Hashing queries and keys separately
    gives them two different sort orders, and query chunk ``c`` need not meet the keys of its
    own bucket at all.

    Unlike the authors' code, which then attends with that shared vector as the query and its
    length-normalised copy as the key (shared-QK, with Reformer's mask on a token attending to
    itself), the scores here are BART's own ``q_proj(x) k_proj(x)^T / sqrt(d)``: a BART
    checkpoint keeps its pretrained attention function (every weight loads and is used as
    pretrained, and one chunk covering the sequence is exactly BART's full attention), and no
    self-mask is needed, since ``q_i . k_i`` does not dominate when the query and key differ.
    Only which keys a query sees comes from the shared hash.

    Training draws fresh rotations at every call from torch's random generator (fixed by the
    run's seed); evaluation uses the rotations of ``seed``, so decoding is deterministic."""

    def __init__(self, embed_dim, num_heads, rounds: int = 4, bucket_size: int = 64, n_buckets: int = 2,
                 seed: int = 1, **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if rounds < 1 or bucket_size < 1 or n_buckets < 2 or n_buckets % 2:
            raise ValueError("LSH needs rounds >= 1, bucket size >= 1 and an even number of buckets >= 2")
        self.rounds = rounds
        self.bucket_size = bucket_size
        self.n_buckets = n_buckets
        self.seed = seed

    def rotations(self, device, dtype) -> Tensor:
        """(heads, head_dim, rounds, n_buckets / 2) random rotations."""
        shape = (self.num_heads, self.head_dim, self.rounds, self.n_buckets // 2)
        if self.training:
            return torch.randn(shape, device=device, dtype=dtype)
        return torch.randn(shape, generator=torch.Generator().manual_seed(self.seed)).to(device=device, dtype=dtype)

    def hashed_vectors(self, q: Tensor, k: Tensor) -> Tensor:
        """The one vector hashed per position: ``(q_proj(x) + k_proj(x)) / 2`` (q arrives scaled)."""
        return (q / self.scaling + k) / 2

    def buckets(self, q: Tensor, k: Tensor) -> Tensor:
        """(batch, heads, rounds, len): every position's bucket in every round."""
        with torch.no_grad():
            return lsh_buckets(self.hashed_vectors(q, k), self.rotations(q.device, q.dtype))

    def attend(self, q, k, v, key_padding_mask):
        return lsh_attention(q, k, v, key_padding_mask, self.buckets(q, k), self.bucket_size, self.dropout_module)


class SinkhornAttention(EfficientSelfAttention):
    """Section 2.3: blocks of ``block_size``, sorted by a Sinkhorn sorting network.

    Table 1 counts no new parameters for Sinkhorn attention: the sorting network scores
    blocks with the layer's own (trained) query and key projections, as the authors' does
    (``sinkhorn_block_sort``: log(relu(R)), 7 iterations at temperature 0.7). Gumbel noise is
    added to its scores in training only, so that evaluation is deterministic (the authors'
    code draws it at evaluation too)."""

    def __init__(self, embed_dim, num_heads, block_size: int = 128, iterations: int = 7, temperature: float = 0.7,
                 **kwargs):
        super().__init__(embed_dim, num_heads, **kwargs)
        if block_size < 1 or iterations < 1 or temperature <= 0:
            raise ValueError("Sinkhorn needs block size >= 1, iterations >= 1 and a positive temperature")
        self.block_size = block_size
        self.iterations = iterations
        self.temperature = temperature

    def attend(self, q, k, v, key_padding_mask):
        return sinkhorn_attention(q, k, v, key_padding_mask, self.block_size, self.iterations, self.temperature,
                                  noise=self.training, dropout=self.dropout_module)
