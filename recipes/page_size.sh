#!/usr/bin/env bash
# Page-size study on arXiv (Table 5): 4096 tokens of input as 128 x 32, 256 x 16,
# 512 x 8 and 1024 x 4 (tokens per page x pages): the paper cuts each document to 4,096
# tokens, then into consecutive pages (the token view). Each page's <s> and </s> count, so
# the sizes read the document's first 4,032, 4,064, 4,080 and 4,088 tokens (docs/recipes.md).
# Each size is its own experiment, page_size_<tokens>x<pages>, on one shared corpus.
#   ARXIV_DIR   Cohan et al.'s arXiv release: train.txt, val.txt, test.txt
#   PAGE_SIZES  a subset of "128x32 256x16 512x8 1024x4" (default: all four)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
require_dataset arxiv
check_shared_settings

use_dataset arxiv
EXP_DATA_NAME=page_size  # one corpus: each size is a view of it
for size in ${PAGE_SIZES:-128x32 256x16 512x8 1024x4}; do
    [[ "$size" =~ ^([0-9]+)x([0-9]+)$ ]] || die "PAGE_SIZES entries look like 512x8, got '$size'"
    (( BASH_REMATCH[1] * BASH_REMATCH[2] == 4096 )) || die "$size is not 4096 tokens in all"
    run_experiment "page_size_$size"
done
