#!/usr/bin/env bash
# Sets up .venv with everything pagesum needs, on a machine with Python 3.10+ and no GPU
# required. Safe to re-run: it only installs what is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1

# The versions the tests last passed with, for the packages the GPU kit carries
# (benchmarks/device/wheelhouse.lock.json), as pip constraints: a fresh setup installs those,
# not whatever was released since.
CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
python - benchmarks/device/wheelhouse.lock.json > "$CONSTRAINTS" <<'PY'
import json, sys
print("\n".join(f"{entry['name']}=={entry['version']}" for entry in json.load(open(sys.argv[1]))))
PY
export PIP_CONSTRAINT="$CONSTRAINTS"

# torch first and pinned: any other spec (or a package asking for torch before it is
# present) makes pip fetch a multi-GB CUDA build. GPU users install their own build first.
python -c "import torch" 2>/dev/null || pip install -q "torch==2.13.0"

# fairseq's Python 3.11 wheel. Its metadata asks for torchaudio, which would replace torch,
# so it goes in without dependencies and its real runtime dependencies are listed here.
python -c "import fairseq" 2>/dev/null || {
    pip install -q --no-deps "ve-fairseq==0.12.3"
    pip install -q cffi cython "hydra-core>=1.3,<1.4" "omegaconf>=2.3,<2.4" numpy regex sacrebleu tqdm \
        bitarray scikit-learn packaging
}
# fairseq's --tensorboard-logdir; without it, every fairseq command says "Please install tensorboardX"
python -c "import tensorboardX" 2>/dev/null || pip install -q tensorboardX

# pagesum itself, with the extras its tools and tests use
pip install -q -e ".[all]"
# fairseq looks for --user-dir NAME in the current folder and beside its own package; a
# regular install puts the plugin there, an editable one does not: a link does, so that
# `--user-dir pagesum_plugin` works from any folder.
SITE=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -L "$SITE/pagesum_plugin" ] || [ ! -e "$SITE/pagesum_plugin" ]; then
    ln -sfn "$PWD/pagesum_plugin" "$SITE/pagesum_plugin"
fi

# ROUGE-1.5.5 (pagesum-score --perl) needs Perl's XML::Parser
if ! perl -MXML::Parser -e 1 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        (apt-get update -qq && apt-get install -y -qq libxml-parser-perl) >/dev/null 2>&1 \
            || echo "setup: could not install libxml-parser-perl; pagesum-score --perl will explain" >&2
    else
        echo "setup: install Debian's libxml-parser-perl for pagesum-score --perl" >&2
    fi
fi
python -c "import torch, fairseq; print(f'pagesum ready: torch {torch.__version__}, fairseq {fairseq.__version__}')"
