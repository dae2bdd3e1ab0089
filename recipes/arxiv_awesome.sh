#!/usr/bin/env bash
# arXiv, AWESOME (Cao and Wang; Table 7, "AWESOME (Attn + Txt)"): BART-large summarizing
# 512-768-token segments one after another with attentive memories, every segment's input
# carrying the salient sentences of the others, which an extractor trained first picks.
# The training settings live in recipes/config/arxiv_awesome.yaml (the summarizer) and
# recipes/config/arxiv_awesome_extractor.yaml; decoding is the arXiv row of the generation
# defaults, per segment (pagesum_plugin/generation/defaults.py).
#
# Stages, and what skips them: recipes/awesome_stages.sh.
#
#   ARXIV_DIR    Cohan et al.'s arXiv release: train.txt, val.txt, test.txt
#                (or name each split with ARXIV_TRAIN, ARXIV_VALID, ARXIV_TEST)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh. Here INIT
# defaults to bart.large.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
. "$(dirname "${BASH_SOURCE[0]}")/awesome_stages.sh"
run_awesome_recipe arxiv arxiv_awesome
