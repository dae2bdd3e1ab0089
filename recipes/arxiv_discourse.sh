#!/usr/bin/env bash
# arXiv, discourse locality: one page per section (section name first), at most
# 8 pages x 1024 tokens, summaries of 100-350 BPE tokens (Table 2, PageSum-Discourse).
#   ARXIV_DIR  Cohan et al.'s arXiv release: train.txt, val.txt, test.txt
#              (or name each split with ARXIV_TRAIN, ARXIV_VALID, ARXIV_TEST)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
run_recipe arxiv arxiv_discourse
