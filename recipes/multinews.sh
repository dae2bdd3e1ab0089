#!/usr/bin/env bash
# Multi-News, document locality: one page per source document, at most
# 7 pages x 1024 tokens, summaries of 150-400 BPE tokens (Table 4, PageSum-Document).
#   MULTINEWS_DIR  the Multi-News release: train.src/.tgt, val.src/.tgt, test.src/.tgt
#                  (or name each source file with MULTINEWS_TRAIN, MULTINEWS_VALID,
#                  MULTINEWS_TEST; the .tgt file is found next to it)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_var MULTINEWS_DIR "the Multi-News folder (train.src, train.tgt, val.src, ...)"
check_shared_settings

EXP_FORMAT=multinews
EXP_TRAIN=$(raw_split "$MULTINEWS_DIR" train.src MULTINEWS_TRAIN)
EXP_VALID=$(raw_split "$MULTINEWS_DIR" val.src MULTINEWS_VALID)
EXP_TEST=$(raw_split "$MULTINEWS_DIR" test.src MULTINEWS_TEST)
run_experiment multinews
