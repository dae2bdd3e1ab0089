"""AWESOME end to end with the project's commands: segment and label the corpus, train the
extractor and write its salient sentences, train AWESOME from a BART checkpoint,
decode with fairseq-generate and score with pagesum-score."""

import json
import os

import pytest

from builders.awesome import awesome_bart_twin, build_awesome, paper_examples, write_text_corpus
from builders.cli import USER_DIR, run_cli
from builders.models import save_bart_checkpoint
from pagesum_plugin import from_pretrained
from pagesum_plugin.checkpoints.safety import load_checkpoint_file
from pagesum_plugin.systems.awesome.extraction_task import SalientExtractor

pytestmark = pytest.mark.slow  # end-to-end runs of fairseq-train and fairseq-generate

N_TEST = 2
COMMON = ["--user-dir", USER_DIR, "--optimizer", "adam", "--lr", "1e-3", "--dropout", "0.0", "--cpu", "--seed", "1",
          "--log-format", "simple", "--log-interval", "1", "--no-epoch-checkpoints", "--num-workers", "0",
          "--batch-size", "2", "--max-update", "3"]
SUMMARIZER = ["--task", "segmented_summarization", "--segmentation", "length", "--salient-sentences", "extractor"]


def pipeline_papers():
    return paper_examples(6, offset=30, sentences=16)  # train, valid and test: 2 each


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    root = tmp_path_factory.mktemp("awesome_pipeline")
    data = str(root / "data")
    papers = pipeline_papers()
    write_text_corpus(data, {"train": papers[:2], "valid": papers[2:4], "test": papers[4:]})
    logs = {}
    logs["segment"] = run_cli(["pagesum-awesome-segment", data, "--embedding-model",
                               "length", "--min-tokens", "150", "--max-tokens", "300"])
    logs["label"] = run_cli(["pagesum-awesome-label", data, "--workers", "1"])

    bart = str(root / "bart" / "model.pt")  # a tiny BART in fairseq's release layout
    save_bart_checkpoint(bart, awesome_bart_twin(*build_awesome(data, "--memory", "none")))

    logs["extractor"] = run_cli(["fairseq-train", data, *COMMON, "--task", "salient_extraction",
                                 "--arch", "awesome_extractor_tiny", "--criterion", "salient_extraction",
                                 "--finetune-from-model", bart, "--save-dir", str(root / "extractor")])
    logs["extract"] = run_cli(["pagesum-awesome-extract", data,
                               "--path", str(root / "extractor" / "checkpoint_best.pt"), "--cpu", "--threshold", "0.3"])
    logs["train"] = run_cli(["fairseq-train", data, *COMMON, *SUMMARIZER, "--arch", "awesome_tiny",
                             "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                             "--finetune-from-model", bart, "--save-dir", str(root / "awesome")])
    hypotheses = str(root / "test.hyp.txt")
    logs["generate"] = run_cli(["fairseq-generate", data, "--user-dir", USER_DIR, *SUMMARIZER,
                                "--path", str(root / "awesome" / "checkpoint_best.pt"), "--gen-subset", "test",
                                "--beam", "2", "--max-len-b", "8", "--batch-size", "2", "--cpu",
                                "--hypotheses-output", hypotheses])
    logs["score"] = run_cli(["pagesum-score", "--hyp", hypotheses, "--ref", os.path.join(data, "test.reference.txt"),
                             "--json"])
    return root, data, logs


def test_the_extractor_trains_from_bart_and_writes_its_salient_sentences(pipeline):
    root, data, logs = pipeline
    assert "initializing the extractor's sentence scorer fresh" in logs["extractor"]
    assert "done training" in logs["extractor"] and "f1" in logs["extractor"]
    for split in ("train", "valid", "test"):
        assert os.path.exists(os.path.join(data, f"{split}.salient.extractor.npy"))
    assert "against the oracle" in logs["extract"]


def test_awesome_trains_from_bart_segment_by_segment(pipeline):
    root, data, logs = pipeline
    assert "memory parameters fresh" in logs["train"]
    assert "segments_per_doc" in logs["train"] and "done training" in logs["train"]
    state = load_checkpoint_file(str(root / "awesome" / "checkpoint_best.pt"))  # weights-only loading
    assert any(".memory." in key for key in state["model"])


def test_generate_and_score_run_on_the_concatenated_summaries(pipeline):
    root, data, logs = pipeline
    hypotheses = (root / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == N_TEST
    scores, _ = json.JSONDecoder().raw_decode(logs["score"][logs["score"].index("{"):])  # stdout, then stderr
    assert scores["examples"] == N_TEST and {"rouge1", "rouge2", "rougeLsum"} <= set(scores["scores"])


def test_summarize_with_the_trained_extractor_equals_fairseq_generate(pipeline):
    """summarize() on the raw test documents: segmented as the corpus was, the extractor's
    salient sentences (at the threshold the extract stage used) in every segment's input,
    decoded with fairseq-generate's settings, gives fairseq-generate's hypotheses."""
    root, data, logs = pipeline
    awesome = from_pretrained(str(root / "awesome"), "checkpoint_best.pt", data_name_or_path=data)
    extractor = SalientExtractor.from_checkpoint(str(root / "extractor" / "checkpoint_best.pt"), data, threshold=0.3)
    texts = [paper["text"] for paper in pipeline_papers()[4:]]
    with pytest.raises(ValueError, match="extractor="):
        awesome.summarize(texts)
    summaries = awesome.summarize(texts, extractor=extractor, beam=2, max_len_b=8, min_len=1, lenpen=1.0,
                                  no_repeat_ngram_size=0)
    assert summaries == (root / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
