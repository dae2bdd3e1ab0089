#!/usr/bin/env bash
# Multi-News, HED (Shen et al., 2023, hierarchical encoding-decoding): each cluster read
# as its documents with boundaries, <s> doc </s> each, every document cut to an equal
# share of 4,096 tokens (PRIMERA's truncation, which the paper follows); summaries cut
# to 1,024 tokens for training and decoded with beam 4 (150-400 BPE tokens, length
# penalty 2, no repeated trigram: the Multi-News decoding of recipes/multinews.sh).
# Fine-tuned from bart.large.cnn (default, "BART-large-cnn + HierEncDec") or, with
# INIT=bart.large, from bart.large ("BART-large + HierEncDec").
# The training settings live in recipes/config/multinews_hed.yaml; this script gives
# fairseq-hydra-train the paths and the devices only.
#   MULTINEWS_DIR  the Multi-News release: train.src/.tgt, val.src/.tgt, test.src/.tgt
#                  (or name each source file with MULTINEWS_TRAIN, MULTINEWS_VALID,
#                  MULTINEWS_TEST; the .tgt file is found next to it)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh. The YAML holds
# one cluster per update, as the paper trains.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
run_recipe multinews multinews_hed
