"""The training loss is label-smoothed cross entropy on the page-mixed distribution, with the
smoothing it is given."""

import pytest
import torch
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

from builders.models import build_tiny

pytestmark = pytest.mark.usefixtures("one_thread")
TOLERANCE = dict(rtol=1e-6, atol=1e-4)


@pytest.fixture(scope="module")
def batch(copy_task_dir):
    """(model, criterion, sample): a tiny PageSum with --label-smoothing 0.1 and six validation
    examples of 1 to 4 pages, so the batch has padding pages and padded summaries."""
    args, task, model = build_tiny(copy_task_dir, "--label-smoothing", "0.1")
    criterion = task.build_criterion(args)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    sample = dataset.collater([dataset[i] for i in range(6)])
    pages = sample["net_input"]["src_tokens"].ne(task.dictionary.pad()).any(-1).sum(1)  # (batch,) real pages
    assert pages.min() < pages.max() == sample["net_input"]["src_tokens"].size(1), "missing pages are padded"
    assert sample["target"].eq(task.dictionary.pad()).any(), "summaries are padded"
    return model, criterion, sample


def reference_loss(model, sample, epsilon, pad):
    """fairseq's label_smoothed_nll_loss on the model's page-mixed log-probabilities."""
    with torch.no_grad():
        lprobs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=True)  # (batch, tgt_len, vocab)
    return label_smoothed_nll_loss(lprobs.view(-1, lprobs.size(-1)), sample["target"].view(-1), epsilon,
                                   ignore_index=pad, reduce=True)


def test_the_loss_is_fairseqs_label_smoothed_nll_loss_at_the_given_epsilon(batch):
    model, criterion, sample = batch
    with torch.no_grad():
        loss, sample_size, logging = criterion(model, sample)
    expected_loss, expected_nll = reference_loss(model, sample, 0.1, criterion.padding_idx)
    torch.testing.assert_close(loss, expected_loss, **TOLERANCE)
    torch.testing.assert_close(logging["nll_loss"], expected_nll, **TOLERANCE)
    assert sample_size == sample["ntokens"] == int(sample["target"].ne(criterion.padding_idx).sum())


def test_smoothing_changes_the_loss_by_far_more_than_the_test_tolerates(batch):
    model, criterion, sample = batch
    smoothed, _ = reference_loss(model, sample, 0.1, criterion.padding_idx)
    unsmoothed, _ = reference_loss(model, sample, 0.0, criterion.padding_idx)
    tolerance = TOLERANCE["atol"] + TOLERANCE["rtol"] * abs(float(smoothed))
    assert abs(float(smoothed - unsmoothed)) > 50 * tolerance  # an epsilon of 0 fails the test above
