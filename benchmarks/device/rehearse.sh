#!/usr/bin/env bash
# The GPU kit rehearsed here, before a visit, on the GPU machine's versions: Python 3.12, torch
# 2.11 (PyPI's build, which runs on the CPU too) and transformers 5.17 in a virtual environment
# of their own, the real wheelhouse installed into it as the machine installs it, then the kit's
# one command at the CPU's smoke sizes. It downloads (torch, the wheelhouse), so the test command
# does not run it; tests/test_device_kit.py rehearses the same command on this checkout's venv.
#
#   bash benchmarks/device/rehearse.sh            # PYTHON312=python3.12, REHEARSAL=.rehearsal
#
# Its logs and results land in $REHEARSAL/out: the files the machine would hand back.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PYTHON312=${PYTHON312:-python3.12}
REHEARSAL=${REHEARSAL:-.rehearsal}
export PIP_DISABLE_PIP_VERSION_CHECK=1

[ -x "$REHEARSAL/venv/bin/python" ] || "$PYTHON312" -m venv "$REHEARSAL/venv"
# the GPU machine's image: the versions seen there (name==version in gpu_machine_packages.txt), and the rest
seen=$(grep -E '^[A-Za-z0-9_.-]+==' benchmarks/device/gpu_machine_packages.txt)
# shellcheck disable=SC2086
"$REHEARSAL/venv/bin/pip" install -q $seen "tokenizers>=0.23,<0.24" \
    "sentencepiece>=0.2.2,<0.3" "safetensors>=0.8,<0.9" "numpy>=2.5,<2.6" scipy scikit-learn regex sacrebleu tqdm \
    six absl-py pyyaml packaging pytest pytest-xdist
[ -x .venv/bin/python ] || bash setup.sh
.venv/bin/python -m benchmarks.device.wheelhouse
rm -rf "$REHEARSAL/out" "$REHEARSAL/site" "$REHEARSAL/runs"
status=0
PYTHON="$REHEARSAL/venv/bin/python" OUT="$REHEARSAL/out" bash benchmarks/device/run.sh --device cpu --quick --test-workers 2 \
    --site "$REHEARSAL/site" --results "$REHEARSAL/runs/scale.jsonl" || status=$?
tail -n 30 "$REHEARSAL/out/kit.log"
exit $status
