#!/usr/bin/env bash
# arXiv, HEPOS (Huang et al., NAACL 2021, Table 5: LSH (7168) with HEPOS encoder-decoder
# attention): each paper read as one flat sequence of 7,168 tokens, fine-tuned from
# bart.large; summaries of 100-350 BPE tokens, beam 4, length penalty 2.
# The training settings live in recipes/config/arxiv_hepos.yaml; this script gives
# fairseq-hydra-train the paths and the devices only.
#   ARXIV_DIR   Cohan et al.'s arXiv release: train.txt, val.txt, test.txt
#               (or name each split with ARXIV_TRAIN, ARXIV_VALID, ARXIV_TEST)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh. Here INIT
# defaults to bart.large.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
INIT=${INIT:-bart.large}
run_recipe arxiv arxiv_hepos
