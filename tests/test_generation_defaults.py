"""One table of generation defaults per dataset, read by every decoding path."""

import os
import shutil
import subprocess

from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY, FairseqEncoderDecoderModel

from builders.cli import BIN_DIR
from builders.models import build_tiny
from pagesum_plugin.corpus.format import CorpusMeta
from pagesum_plugin.generation.defaults import DATASETS, SYSTEMS, for_dataset

DECODING_FLAGS = os.path.join(BIN_DIR, "pagesum-decoding-flags")  # what the recipes' generate stage runs


def test_every_dataset_but_wcep_decodes_with_the_papers_beam_length_penalty_and_trigram_blocking():
    searches = {name: (d.beam, d.lenpen, d.no_repeat_ngram_size) for name, d in DATASETS.items()}
    assert searches.pop("wcep") == (6, 1.0, 3)  # single-sentence summaries, decoded as BART decodes XSum
    assert set(searches.values()) == {(4, 2.0, 3)}


def test_summary_lengths_are_each_datasets_own():
    lengths = {name: (d.min_len, d.max_len_b) for name, d in DATASETS.items() if name != "default"}
    assert lengths == {"arxiv": (100, 350), "pubmed": (150, 400), "govreport": (500, 900),
                       "multinews": (150, 400), "aclsum": (60, 160), "wcep": (10, 60), "multixscience": (50, 256)}


def test_hepos_decodes_govreport_with_the_authors_lengths():
    """LongDocSum's decoding script: beam 4, length penalty 2, trigram blocking, 100 to 800 tokens."""
    hepos = for_dataset("govreport", "hepos")
    assert (hepos.beam, hepos.lenpen, hepos.no_repeat_ngram_size) == (4, 2.0, 3)
    assert (hepos.min_len, hepos.max_len_b) == (100, 800)
    assert for_dataset("govreport", "pagesum") == for_dataset("govreport") == DATASETS["govreport"]
    assert for_dataset("pubmed", "hepos") == DATASETS["pubmed"], "a system without a row of its own: the dataset's"
    assert set(SYSTEMS) == {("hepos", "govreport")}


def test_every_summarizer_architecture_is_named_after_its_model():
    """The recipes key the defaults by the architecture's name up to its first underscore
    (recipes/experiment_config.py ``system``): that must be the registered model."""
    names = {cls: name for name, cls in MODEL_REGISTRY.items()}
    summarizers = [(arch, cls) for arch, cls in ARCH_MODEL_REGISTRY.items()
                   if cls.__module__.startswith("pagesum_plugin") and issubclass(cls, FairseqEncoderDecoderModel)]
    assert summarizers and all(arch.split("_")[0] == names[cls] for arch, cls in summarizers)


def test_a_task_decodes_with_the_row_of_the_model_it_builds(copy_task_dir, tmp_path):
    """--eval-rouge and summarize() read the task's defaults once it has built its model: a
    HEPOS model on GovReport gets the HEPOS row, PageSum the dataset's."""
    data = str(tmp_path / "govreport")
    shutil.copytree(copy_task_dir, data)
    meta = CorpusMeta.load(data)
    meta.dataset = "govreport"
    meta.save(data)
    for arch, expected in (("hepos_tiny", SYSTEMS[("hepos", "govreport")]), ("pagesum_tiny", DATASETS["govreport"])):
        _, task, _ = build_tiny(data, arch=arch)
        assert task.generation_defaults == expected, arch


def test_an_unknown_dataset_gets_the_default_row():
    assert for_dataset("jsonl") == DATASETS["default"]


def test_segments_are_decoded_with_the_datasets_search_and_their_own_lengths():
    """AWESOME: a segment that no reference sentence went to has an empty target, so its
    summary may end at once."""
    segment = for_dataset("govreport", per_segment=True)
    assert (segment.beam, segment.lenpen, segment.no_repeat_ngram_size) == (4, 2.0, 3)
    assert (segment.min_len, segment.max_len_b) == (0, 256)


def test_the_recipes_command_prints_a_systems_row_when_given_the_system():
    out = subprocess.run([DECODING_FLAGS, "govreport", "--system", "hepos"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[out.index("--min-len") + 1] == "100" and out[out.index("--max-len-b") + 1] == "800"


def test_the_recipes_command_prints_fairseq_generate_flags():
    out = subprocess.run([DECODING_FLAGS, "govreport"], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["--beam", "4", "--lenpen", "2.0", "--no-repeat-ngram-size", "3", "--min-len", "500",
                   "--max-len-a", "0", "--max-len-b", "900"]
