"""fairseq-generate on this task prints ROUGE against the split's references, as
pagesum-score computes it, and no BLEU line."""

import re
from pathlib import Path

import pytest

from builders.cli import USER_DIR, run_cli
from builders.models import build_tiny
from pagesum_plugin.checkpoints.builder import save_checkpoint
from pagesum_plugin.evaluation.rouge import corpus_rouge

pytestmark = pytest.mark.slow  # a fairseq-generate run


def test_fairseq_generate_prints_the_splits_rouge_and_no_bleu(paged, tmp_path):
    args, _, model = build_tiny(paged)
    save_checkpoint(tmp_path / "model.pt", args, model)
    log = run_cli(["fairseq-generate", paged, "--user-dir", USER_DIR, "--task", "paged_summarization",
                   "--path", str(tmp_path / "model.pt"), "--gen-subset", "test", "--cpu", "--beam", "2",
                   "--max-len-b", "20", "--batch-size", "4", "--hypotheses-output", str(tmp_path / "test.hyp")])
    assert "BLEU" not in log
    printed = re.search(r"Generate test: ROUGE-1 ([\d.]+), ROUGE-2 ([\d.]+), ROUGE-Lsum ([\d.]+) \(F1", log)
    assert printed, log[-2000:]
    hypotheses = (tmp_path / "test.hyp").read_text().splitlines()
    references = (Path(paged) / "test.reference.txt").read_text(encoding="utf-8").splitlines()
    expected = corpus_rouge(hypotheses, references, workers=1)
    assert [float(x) for x in printed.groups()] == [round(expected[m], 2) for m in ("rouge1", "rouge2", "rougeLsum")]
