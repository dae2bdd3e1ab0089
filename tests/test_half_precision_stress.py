"""Half precision at the edges: a batch whose every page but one is padding, a page of one
token, a summary at the longest the model allows, and page confidences of +-1e4 each give a
finite loss and finite gradients, and beam search gives no NaN. bf16 on CPU always; fp16 and
bf16 on CUDA where there is a GPU."""

import pytest
import torch
from fairseq import utils

from builders.models import build_tiny, decoder_input, make_source_sensitive, paged_batch
from pagesum_plugin.generation.page_sequence_generator import PageSumSequenceGenerator

pytestmark = pytest.mark.usefixtures("one_thread")

NO_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch sees none)")
PRECISIONS = [
    pytest.param("cpu", torch.bfloat16, id="cpu-bf16"),
    pytest.param("cuda", torch.float16, id="cuda-fp16", marks=NO_GPU),
    pytest.param("cuda", torch.bfloat16, id="cuda-bf16", marks=NO_GPU),
]
MAX_PAGES = 8


def padding_but_one(d):
    """One example of one real page among eight: seven all-padding pages."""
    return [[[10, 11, 12, 13]]], [[20, 21, 22]]


def one_token_page(d):
    return [[[10]], [[11], [12, 13, 14]]], [[20, 21], [22]]


def longest_summary(d, length):
    """Summaries that fill every decoder position (<s> and </s> included)."""
    return [[[10, 11, 12], [13, 14]], [[15]]], [[20 + i % 20 for i in range(length - 2)]] * 2


def confidences_of_1e4(module, inputs, out):
    """The confidence layer's output (page rows, tgt_len, 1) set to +1e4 and -1e4 on alternate
    page rows; its gradient still reaches the layer (straight through)."""
    rows = torch.arange(out.size(0), device=out.device).view(-1, 1, 1)
    extreme = torch.where(rows.remainder(2).bool(), -1e4, 1e4).to(out)
    return out + (extreme - out).detach()


CASES = ["padding_but_one", "one_token_page", "longest_summary", "confidence_1e4"]


def stressed(copy_task_dir, case, device, dtype):
    """(model, criterion, dictionary, sample) for one case, in ``dtype`` on ``device``."""
    args, task, model = build_tiny(copy_task_dir, "--label-smoothing", "0.1")
    d = task.dictionary
    make_source_sensitive(model, d)
    if case == "confidence_1e4":  # every page row's confidence is +1e4 or -1e4, alternately
        model.decoder.page_confidence.register_forward_hook(confidences_of_1e4)
        pages, summaries = [[[10, 11], [12, 13, 14], [15]], [[16, 17], [18]]], [[20, 21, 22], [23]]
    elif case == "longest_summary":
        pages, summaries = longest_summary(d, model.max_decoder_positions())
    else:
        pages, summaries = {"padding_but_one": padding_but_one, "one_token_page": one_token_page}[case](d)
    src = paged_batch(pages, d, max_pages=MAX_PAGES)  # (batch, 8, page_len)
    target, prev = decoder_input(summaries, d)
    sample = {"id": torch.arange(len(pages)), "net_input": {"src_tokens": src, "src_lengths": src.ne(d.pad()).sum((1, 2)),
                                                           "prev_output_tokens": prev},
              "target": target, "ntokens": int(target.ne(d.pad()).sum())}
    criterion = task.build_criterion(args).to(device=device, dtype=dtype)
    return model.to(device=device, dtype=dtype), criterion, d, utils.apply_to_sample(lambda t: t.to(device), sample)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("device, dtype", PRECISIONS)
def test_loss_and_gradients_are_finite(copy_task_dir, case, device, dtype):
    model, criterion, _, sample = stressed(copy_task_dir, case, device, dtype)
    model.train()
    loss, sample_size, logging = criterion(model, sample)
    (loss / sample_size).backward()
    assert torch.isfinite(loss) and torch.isfinite(logging["nll_loss"])
    for name, p in model.named_parameters():
        assert p.grad is not None and bool(torch.isfinite(p.grad).all()), name
    assert any(bool(p.grad.ne(0).any()) for p in model.parameters())


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("device, dtype", PRECISIONS)
def test_beam_search_gives_no_nan(copy_task_dir, case, device, dtype):
    model, _, d, sample = stressed(copy_task_dir, case, device, dtype)
    model.eval()
    longest = model.max_decoder_positions() - 1 if case == "longest_summary" else 12
    generator = PageSumSequenceGenerator([model], d, beam_size=2, max_len_a=0, max_len_b=longest, min_len=longest - 2)
    with torch.no_grad():
        hypos = generator.generate([model], {"id": sample["id"], "net_input": {"src_tokens": sample["net_input"]["src_tokens"]}})
    for example in hypos:
        best = example[0]
        assert len(best["tokens"]) >= longest - 1  # the summary really reaches the length asked
        assert torch.isfinite(best["score"]) and bool(torch.isfinite(best["positional_scores"]).all())
        assert bool(torch.isfinite(best["page_weights"]).all())
        torch.testing.assert_close(best["page_weights"].float().sum(-1).cpu(), torch.ones(len(best["page_weights"])),
                                   atol=2e-2, rtol=0)
