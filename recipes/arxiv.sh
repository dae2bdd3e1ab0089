#!/usr/bin/env bash
# arXiv, spatial locality: 7 pages x 1024 tokens, summaries of 100-350 BPE tokens
# (Table 1, PageSum (7168); INIT=bart.large gives PageSum*).
#   ARXIV_DIR  Cohan et al.'s arXiv release: train.txt, val.txt, test.txt
#              (or name each split with ARXIV_TRAIN, ARXIV_VALID, ARXIV_TEST)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_var ARXIV_DIR "the arXiv folder (train.txt, val.txt, test.txt)"
check_shared_settings

EXP_FORMAT=arxiv
EXP_TRAIN=$(raw_split "$ARXIV_DIR" train.txt ARXIV_TRAIN)
EXP_VALID=$(raw_split "$ARXIV_DIR" val.txt ARXIV_VALID)
EXP_TEST=$(raw_split "$ARXIV_DIR" test.txt ARXIV_TEST)
run_experiment arxiv
