"""Tiny PageSum models, their plain-BART twins, and fairseq-format checkpoints."""

import argparse
import os
from typing import List, Sequence, Tuple

import torch
from fairseq.data import data_utils
from fairseq.models.bart import BARTModel

import pagesum_plugin.registration  # noqa: F401  (registers the task, model and criterion)
from pagesum_plugin.checkpoints.builder import build_model
from pagesum_plugin.systems.pagesum.model import CONFIDENCE_KEYS


def build_tiny(data_dir: str, *extra_args: str, arch: str = "pagesum_tiny", seed: int = 0):
    """(args, task, model) for a tiny model (any ``*_tiny`` architecture) over ``data_dir``, in
    eval mode, without dropout; ``extra_args`` are fairseq command-line flags."""
    torch.manual_seed(seed)
    args, task, model = build_model(data_dir, arch, "--criterion", "paged_label_smoothed_cross_entropy",
                                    "--optimizer", "adam", "--dropout", "0.0", "--cpu", *extra_args)
    if hasattr(model.decoder, "page_confidence"):
        with torch.no_grad():  # a confidence layer that really discriminates between pages
            model.decoder.page_confidence.weight.normal_(0, 1.0)
    return args, task, model.eval()


def make_source_sensitive(model, dictionary, seed: int = 0):
    """Make a random model's outputs depend strongly on its input, so that beam search
    ends different examples at different steps (as a trained model does): cross-attention
    is amplified and </s> gets an output direction of its own."""
    with torch.no_grad():
        for layer in model.decoder.layers:
            layer.encoder_attn.out_proj.weight.mul_(50.0)
        weight = model.decoder.output_projection.weight  # tied with the embeddings
        weight[dictionary.eos()] = torch.randn(weight.size(1), generator=torch.Generator().manual_seed(seed)) * 0.1
    return model


def bart_twin(args, task, pagesum_model) -> BARTModel:
    """A stock fairseq BARTModel holding exactly the PageSum model's BART weights."""
    bart = BARTModel.build_model(args, task)
    state = {k: v for k, v in pagesum_model.state_dict().items() if k not in CONFIDENCE_KEYS}
    bart.load_state_dict(state, strict=True)
    return bart.eval()


def vocab(dictionary) -> Tuple[int, int]:
    """Ids of ordinary words: after the specials, before the padding symbols of the dictionary."""
    return dictionary.nspecial, len(dictionary) - 8


def paged_batch(page_lists: Sequence[Sequence[Sequence[int]]], dictionary, max_pages: int = 0) -> torch.Tensor:
    """Content ids per page (or document) per example -> (batch, max_pages, page_len)
    src_tokens, every row ``<s> ... </s>``, missing rows all padding: what the pages and
    documents views and their collater make."""
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    width = max(len(p) for pages in page_lists for p in pages) + 2
    n_pages = max(max_pages, max(len(pages) for pages in page_lists))
    out = torch.full((len(page_lists), n_pages, width), pad, dtype=torch.long)
    for i, pages in enumerate(page_lists):
        for j, page in enumerate(pages):
            out[i, j, : len(page) + 2] = torch.tensor([bos, *page, eos])
    return out


def decoder_input(summaries: Sequence[Sequence[int]], dictionary) -> Tuple[torch.Tensor, torch.Tensor]:
    """(target, prev_output_tokens), each (batch, tgt_len): <s> s </s> and </s> <s> s."""
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    targets = [torch.tensor([bos, *s, eos]) for s in summaries]
    return (
        data_utils.collate_tokens(targets, pad, eos),
        data_utils.collate_tokens(targets, pad, eos, move_eos_to_beginning=True),
    )


def save_bart_checkpoint(path: str, bart: BARTModel, arch: str = "bart_base", **arch_overrides) -> None:
    """Write ``bart`` the way fairseq's released BART checkpoints are laid out
    (``{"args": Namespace, "model": state_dict, ...}``)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    ns = argparse.Namespace(arch=arch, task="denoising", **arch_overrides)
    torch.save(
        {
            "args": ns,
            "model": bart.state_dict(),
            # fairseq reads the last entry when --finetune-from-model loads a checkpoint
            "optimizer_history": [
                {"criterion_name": "CrossEntropyCriterion", "optimizer_name": "FairseqAdam",
                 "lr_scheduler_state": {"best": None}, "num_updates": 0}
            ],
            "extra_state": {},
            "last_optimizer_state": None,
        },
        path,
    )


def random_pages(rng: torch.Generator, n_pages: int, low: int, high: int, min_len: int = 4, max_len: int = 12) -> List[List[int]]:
    pages = []
    for _ in range(n_pages):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=rng))
        pages.append(torch.randint(low, high, (length,), generator=rng).tolist())
    return pages


def assert_incremental_equals_full(model, src_tokens, prev_output_tokens, pad: int, encoder_out=None,
                                   full_output=None, atol: float = 1e-4) -> None:
    """Decoding one token at a time, with fairseq's incremental state, gives at every
    position that is not padding the logits of the full forward pass, and its page weights
    where the model reports them. ``encoder_out`` and ``full_output`` default to the model's
    own encoder and forward pass over ``src_tokens``."""
    full_logits, full_extra = full_output or model(src_tokens, None, prev_output_tokens)
    encoder_out = encoder_out or model.encoder(src_tokens)
    real = prev_output_tokens.ne(pad)  # (batch, tgt_len)
    state = {}
    for t in range(prev_output_tokens.size(1)):
        logits, extra = model.decoder(prev_output_tokens[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
        rows = real[:, t]
        torch.testing.assert_close(logits[rows, 0], full_logits[rows, t], atol=atol, rtol=0)
        if full_extra.get("page_weights") is not None:
            torch.testing.assert_close(extra["page_weights"][rows, :, 0], full_extra["page_weights"][rows, :, t],
                                       atol=1e-5, rtol=0)


def at_summary_positions(output, prev_output_tokens, pad: int):
    """``output`` (batch, tgt_len, ...) of a full forward pass with every padding position zeroed:
    what a loss reads. What a decoder computes at padding positions is not part of its contract:
    its causal self-attention leaves the padding after a summary unmasked, which only the
    padding positions read."""
    padding = prev_output_tokens.eq(pad)  # (batch, tgt_len)
    return output.masked_fill(padding.view(*padding.shape, *[1] * (output.dim() - 2)), 0)


def log_probs(model, src_tokens, prev_output_tokens):
    """(log-probabilities (batch, tgt_len, vocab) in fp32, the decoder's extra output) of a
    full forward pass."""
    logits, extra = model(src_tokens, None, prev_output_tokens)
    return torch.log_softmax(logits.float(), dim=-1), extra


def assert_batched_equals_alone(model, examples, summaries, dictionary, make_batch=None) -> None:
    """A batch of examples (each a list of pages or documents of content ids) of different
    sizes gives every example the log-probabilities, and page weights, that it gets alone."""
    make_batch = make_batch or (lambda rows: paged_batch(rows, dictionary))
    _, prev = decoder_input(summaries, dictionary)
    batched, batched_extra = log_probs(model, make_batch(examples), prev)
    for i, (example, summary) in enumerate(zip(examples, summaries)):
        _, prev_i = decoder_input([summary], dictionary)
        alone, extra = log_probs(model, make_batch([example]), prev_i)
        length = len(summary) + 2  # <s> summary </s>
        torch.testing.assert_close(batched[i, :length], alone[0], atol=1e-5, rtol=0)
        if extra.get("page_weights") is not None:
            torch.testing.assert_close(batched_extra["page_weights"][i, : len(example), :length],
                                       extra["page_weights"][0], atol=1e-5, rtol=0)


def assert_gradients_close(grads, expected_grads, rtol: float = 1e-4) -> None:
    """Every parameter's gradient (name -> tensor) equals its reference to ``rtol`` relative to the
    largest reference gradient: gradients that are 0 in theory are rounding noise."""
    assert grads.keys() == expected_grads.keys()
    scale = max(float(g.abs().max()) for g in expected_grads.values())
    for key, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[key], rtol=rtol, atol=rtol * scale, msg=key)
