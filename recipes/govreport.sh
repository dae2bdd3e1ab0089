#!/usr/bin/env bash
# GovReport, spatial locality, summaries of 500-900 BPE tokens (Table 1):
# 20 pages x 1024 tokens (PageSum (20480)), and with GOVREPORT_PAGES=7 the
# 7 x 1024 row (PageSum (7168)).
#   GOVREPORT_DIR  GovReport as JSON lines: train.jsonl, valid.jsonl, test.jsonl
#                  (or name each split with GOVREPORT_TRAIN, GOVREPORT_VALID, GOVREPORT_TEST)
#   GOVREPORT_PAGES  20 (default) or 7
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_dataset govreport
check_shared_settings
GOVREPORT_PAGES=${GOVREPORT_PAGES:-20}
case "$GOVREPORT_PAGES" in
    20 | 7) ;;
    *) die "GOVREPORT_PAGES must be 20 or 7 (the paper's two settings), got '$GOVREPORT_PAGES'" ;;
esac

use_dataset govreport
run_experiment "govreport_${GOVREPORT_PAGES}x1024"
