#!/usr/bin/env bash
# arXiv, spatial locality: 7 pages x 1024 tokens, summaries of 100-350 BPE tokens
# (Table 1, PageSum (7168); INIT=bart.large gives PageSum*).
#   ARXIV_DIR  Cohan et al.'s arXiv release: train.txt, val.txt, test.txt
#              (or name each split with ARXIV_TRAIN, ARXIV_VALID, ARXIV_TEST)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
run_recipe arxiv arxiv
