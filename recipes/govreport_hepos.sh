#!/usr/bin/env bash
# GovReport, HEPOS (Huang et al., NAACL 2021, Table 4: SINKHORN (10240) with HEPOS
# encoder-decoder attention): each report read as one flat sequence of 10,240 tokens,
# fine-tuned from bart.large; summaries of 500-900 BPE tokens, beam 4, length penalty 2.
# The training settings live in recipes/config/govreport_hepos.yaml; this script gives
# fairseq-hydra-train the paths and the devices only.
#   GOVREPORT_DIR  GovReport as JSON lines: train.jsonl, valid.jsonl, test.jsonl
#                  (or name each split with GOVREPORT_TRAIN, GOVREPORT_VALID, GOVREPORT_TEST)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh. Here INIT
# defaults to bart.large.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
INIT=${INIT:-bart.large}
run_recipe govreport govreport_hepos
