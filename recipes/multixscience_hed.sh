#!/usr/bin/env bash
# Multi-XScience, HED (Shen et al., 2023, Table 1): each cluster read as its documents with
# boundaries, <s> doc </s> each, every document cut to an equal share of 4,096 tokens
# (PRIMERA's truncation, which the paper follows); summaries cut to 1,024 tokens for training
# and decoded with the Multi-XScience row of pagesum_plugin/generation/defaults.py.
# Fine-tuned from bart.large.cnn (default, "BART-large-cnn + HierEncDec") or, with
# INIT=bart.large, from bart.large ("BART-large + HierEncDec").
# The training settings live in recipes/config/multixscience_hed.yaml; this script gives
# fairseq-hydra-train the paths and the devices only.
#   MULTIXSCIENCE_DIR  Multi-XScience (Lu et al., 2020) in pagesum's jsonl format, one
#                      example a line, {"id", "summary": the related-work paragraph,
#                      "documents": [the paper's abstract, then each cited abstract]}, as
#                      PRIMERA reads it: train.jsonl, valid.jsonl, test.jsonl (or name each
#                      split with MULTIXSCIENCE_TRAIN, MULTIXSCIENCE_VALID, MULTIXSCIENCE_TEST)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
run_recipe multixscience multixscience_hed
