#!/usr/bin/env bash
# Page-wise against global decoding (Table 6). Global decoding encodes the same pages
# but decodes once over their concatenated encodings (--page-decoding global):
#   arXiv: spatial locality, 4 pages x 1024 tokens, summaries of 100-350 BPE tokens;
#   Multi-News: document locality, at most 7 pages x 1024 tokens, 150-400 BPE tokens.
# Both decodings are trained on the same preprocessed data.
#   ARXIV_DIR, MULTINEWS_DIR  as in recipes/arxiv.sh and recipes/multinews.sh
#   DATASETS   a subset of "arxiv multinews" (default: both; only their folders are needed)
#   DECODINGS  a subset of "global page" (default: both)
# Shared settings (OUT_DIR, BART_DIR, NUM_GPUS, ...): see recipes/common.sh.
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
DATASETS=${DATASETS:-arxiv multinews}
for dataset in $DATASETS; do
    case "$dataset" in
        arxiv | multinews) require_dataset "$dataset" ;;
        *) die "DATASETS may hold arxiv and multinews, got '$dataset'" ;;
    esac
done
check_shared_settings

for dataset in $DATASETS; do
    use_dataset "$dataset"
    EXP_DATA_NAME=global_decoding_$dataset
    for decoding in ${DECODINGS:-global page}; do
        case "$decoding" in
            global | page) ;;
            *) die "DECODINGS may hold global and page, got '$decoding'" ;;
        esac
        run_experiment "global_decoding_${dataset}_$decoding"
    done
done
