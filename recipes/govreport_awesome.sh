#!/usr/bin/env bash
# GovReport, AWESOME (Cao and Wang; Table 3, "AWESOME (Attn + Txt)"): BART-large summarizing
# 512-768-token segments one after another with attentive memories, every segment's input
# carrying the salient sentences of the others, which an extractor trained first picks.
# The training settings live in recipes/config/govreport_awesome.yaml (the summarizer) and
# recipes/config/govreport_awesome_extractor.yaml; decoding is the GovReport row of the generation
# defaults, per segment (pagesum_plugin/generation/defaults.py).
#
# Stages, and what skips them: recipes/awesome_stages.sh.
#
#   GOVREPORT_DIR    GovReport as JSON lines: train.jsonl, valid.jsonl, test.jsonl
#                    (or name each split with GOVREPORT_TRAIN, GOVREPORT_VALID, GOVREPORT_TEST)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh. Here INIT
# defaults to bart.large.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
. "$(dirname "${BASH_SOURCE[0]}")/awesome_stages.sh"
run_awesome_recipe govreport govreport_awesome
