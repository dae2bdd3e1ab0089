#!/usr/bin/env bash
# PubMed, spatial locality: 7 pages x 1024 tokens, summaries of 150-400 BPE tokens
# (Table 1; INIT=bart.large gives PageSum*).
#   PUBMED_DIR  Cohan et al.'s PubMed release: train.txt, val.txt, test.txt
#               (or name each split with PUBMED_TRAIN, PUBMED_VALID, PUBMED_TEST)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
run_recipe pubmed pubmed
