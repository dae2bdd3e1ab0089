#!/usr/bin/env bash
# WCEP, HED (Shen et al., 2023, Table 1): each cluster read as its documents with
# boundaries, <s> doc </s> each, every document cut to an equal share of 4,096 tokens
# (PRIMERA's truncation, which the paper follows); summaries cut to 1,024 tokens for training
# and decoded with the WCEP row of pagesum_plugin/generation/defaults.py.
# Fine-tuned from bart.large.cnn (default, "BART-large-cnn + HierEncDec") or, with
# INIT=bart.large, from bart.large ("BART-large + HierEncDec").
# The training settings live in recipes/config/wcep_hed.yaml; this script gives
# fairseq-hydra-train the paths and the devices only.
#   WCEP_DIR  WCEP (Ghalandari et al., 2020) in pagesum's jsonl format, one cluster a line,
#             {"id", "summary", "documents": [article, ...]}: train.jsonl, valid.jsonl,
#             test.jsonl (or name each split with WCEP_TRAIN, WCEP_VALID, WCEP_TEST)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
run_recipe wcep wcep_hed
