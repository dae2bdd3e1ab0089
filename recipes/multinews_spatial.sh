#!/usr/bin/env bash
# Multi-News, spatial locality: the cluster's documents concatenated and split into
# 7 pages x 1024 tokens, summaries of 150-400 BPE tokens (Table 4, PageSum-Spatial).
#   MULTINEWS_DIR  the Multi-News release: train.src/.tgt, val.src/.tgt, test.src/.tgt
#                  (or name each source file with MULTINEWS_TRAIN, MULTINEWS_VALID,
#                  MULTINEWS_TEST; the .tgt file is found next to it)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
run_recipe multinews multinews_spatial
