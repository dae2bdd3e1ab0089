"""Tiny HEPOS models built through fairseq's own parser, flat inputs, and dense references."""

import contextlib
from typing import Optional, Sequence

import torch
from fairseq.modules import MultiheadAttention

from builders.models import build_tiny, vocab

# window, bucket and block sizes small enough that short test inputs span several of them
SMALL_PATTERNS = ["--window-size", "8", "--lsh-bucket-size", "8", "--sinkhorn-block-size", "8"]
ENCODER_VARIANTS = ("full", "window", "lsh", "sinkhorn")


@contextlib.contextmanager
def single_thread():
    """Run tiny models on one CPU thread: at these sizes extra threads cost more than they
    save, and far more on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def build_hepos(data_dir: str, *extra_args: str, seed: int = 0):
    """(args, task, HeposModel) for a hepos_tiny model over ``data_dir``, in eval mode."""
    return build_tiny(data_dir, *extra_args, arch="hepos_tiny", seed=seed)


def random_texts(rng: torch.Generator, lengths: Sequence[int], dictionary):
    low, high = vocab(dictionary)
    return [torch.randint(low, high, (n,), generator=rng).tolist() for n in lengths]


def flat_batch(texts: Sequence[Sequence[int]], dictionary) -> torch.Tensor:
    """Content ids per example -> (batch, 1, len) src_tokens ``<s> ... </s>``, right-padded,
    as the task's flat view delivers them."""
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    width = max(len(t) for t in texts) + 2
    out = torch.full((len(texts), 1, width), pad, dtype=torch.long)
    for i, text in enumerate(texts):
        out[i, 0, : len(text) + 2] = torch.tensor([bos, *text, eos])
    return out


def sample_of(src_tokens: torch.Tensor, pad: int) -> dict:
    return {"id": torch.arange(src_tokens.size(0)),
            "net_input": {"src_tokens": src_tokens, "src_lengths": src_tokens.ne(pad).sum((1, 2))}}


def attention_like(module: MultiheadAttention, cls, *args, **kwargs):
    """A ``cls`` attention holding exactly ``module``'s projections."""
    other = cls(module.embed_dim, module.num_heads, *args, **kwargs)
    other.load_state_dict({**other.state_dict(), **module.state_dict()})  # its own new weights stay as built
    return other.eval()


def stock_attention(embed_dim: int, num_heads: int, seed: int, **kwargs) -> MultiheadAttention:
    torch.manual_seed(seed)
    return MultiheadAttention(embed_dim, num_heads, **kwargs).eval()


def dense_attention(q, k, v, allowed: torch.Tensor, key_padding_mask: Optional[torch.Tensor] = None):
    """softmax(q k^T) v over the allowed (query, key) pairs only: the reference for every pattern.

    q, k, v: (batch, heads, len_q / len_k, head_dim), q scaled; allowed: bool, broadcastable to
    (batch, heads, len_q, len_k)."""
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k).float()
    if key_padding_mask is not None:
        allowed = allowed & ~key_padding_mask[:, None, None, :]
    probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return torch.einsum("bhqk,bhkd->bhqd", probs, v.float())


def per_head(module: MultiheadAttention, x: torch.Tensor, which: str) -> torch.Tensor:
    """(len, batch, dim) -> the module's projected (batch, heads, len, head_dim); queries scaled."""
    proj = {"q": module.q_proj, "k": module.k_proj, "v": module.v_proj}[which]
    y = proj(x) * (module.scaling if which == "q" else 1.0)
    return y.view(x.size(0), x.size(1), module.num_heads, module.head_dim).permute(1, 2, 0, 3)


def merge_heads(module: MultiheadAttention, out: torch.Tensor) -> torch.Tensor:
    """(batch, heads, len, head_dim) -> the module's output (len, batch, dim)."""
    batch, heads, length, head_dim = out.shape
    return module.out_proj(out.permute(2, 0, 1, 3).reshape(length, batch, heads * head_dim).to(module.out_proj.weight.dtype))


def reference_block_sort(q, k, padding, block: int, iterations: int, temperature: float) -> torch.Tensor:
    """The HEPOS authors' sorting network, block by block with plain loops: R_ij is the dot
    product of block i's mean query and block j's mean key (real tokens only), and the sort
    is ``iterations`` rounds of row then column normalisation of exp(log(relu(R) + 1e-6) / T)
    over the blocks holding a real token (0 elsewhere).

    q, k: (batch, heads, len, head_dim), q scaled, len a multiple of ``block``; padding:
    (batch, len). Returns (batch, heads, n_blocks, n_blocks) in fp64."""
    q, k = q.detach(), k.detach()
    batch, heads, length, _ = q.shape
    n = length // block
    out = torch.zeros(batch, heads, n, n, dtype=torch.float64)
    for b in range(batch):
        real = ~padding[b].view(n, block)  # (n_blocks, block)
        blocks = [i for i in range(n) if real[i].any()]
        for h in range(heads):
            mean = lambda x, i: x[b, h, i * block:(i + 1) * block][real[i]].double().mean(0)  # noqa: E731
            scores = torch.tensor([[float(mean(q, i) @ mean(k, j)) for j in blocks] for i in blocks],
                                  dtype=torch.float64)
            sort = torch.exp(torch.log(scores.clamp_min(0.0) + 1e-6) / temperature)
            for _ in range(iterations):
                sort = sort / sort.sum(1, keepdim=True)
                sort = sort / sort.sum(0, keepdim=True)
            for a, i in enumerate(blocks):
                for c, j in enumerate(blocks):
                    out[b, h, i, j] = sort[a, c]
    return out


def sinkhorn_dense_reference(q, k, v, padding, block: int, sort: torch.Tensor) -> torch.Tensor:
    """Sinkhorn attention spelled out from a sort matrix: the queries of block i attend, in one
    softmax, to the real keys of block i and to the sorted block's slots, slot t holding
    sum_j sort[i, j] k[j, t] over the real keys of the blocks (a slot with no real key behind it
    is masked). Values mix the same way.

    q, k, v: (batch, heads, len, head_dim), q scaled, len a multiple of ``block``; padding:
    (batch, len); sort: (batch, heads, n_blocks, n_blocks). Returns (batch, heads, len, head_dim)."""
    batch, heads, length, head_dim = q.shape
    n = length // block
    out = torch.zeros(batch, heads, length, head_dim, dtype=torch.float64)
    for b, h, i in torch.cartesian_prod(torch.arange(batch), torch.arange(heads), torch.arange(n)).tolist():
        own = slice(i * block, (i + 1) * block)
        real = (~padding[b]).double().view(n, block)  # (n_blocks, block)
        mixing = sort[b, h, i].double()[:, None] * real  # (n_blocks, block): block j's weight in slot t
        sorted_k = torch.einsum("jt,jtd->td", mixing, k[b, h].double().view(n, block, head_dim))
        sorted_v = torch.einsum("jt,jtd->td", mixing, v[b, h].double().view(n, block, head_dim))
        keys, values = torch.cat([k[b, h, own].double(), sorted_k]), torch.cat([v[b, h, own].double(), sorted_v])
        masked = torch.cat([padding[b, own], mixing.sum(0) <= 0])  # (2 * block,)
        scores = (q[b, h, own].double() @ keys.t()).masked_fill(masked, float("-inf"))
        out[b, h, own] = torch.nan_to_num(torch.softmax(scores, -1)) @ values
    return out
