#!/usr/bin/env bash
# PubMed, HEPOS (Huang et al., NAACL 2021, Table 4: LSH (7168) with HEPOS encoder-decoder
# attention): each paper read as one flat sequence of 7,168 tokens, fine-tuned from
# bart.large; summaries of 150-400 BPE tokens, beam 4, length penalty 2.
# The training settings live in recipes/config/pubmed_hepos.yaml; this script gives
# fairseq-hydra-train the paths and the devices only.
#   PUBMED_DIR  Cohan et al.'s PubMed release: train.txt, val.txt, test.txt
#               (or name each split with PUBMED_TRAIN, PUBMED_VALID, PUBMED_TEST)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh. Here INIT
# defaults to bart.large.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
INIT=${INIT:-bart.large}
run_recipe pubmed pubmed_hepos
