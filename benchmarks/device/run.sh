#!/usr/bin/env bash
# The GPU kit's one command (benchmarks/device/README.md), run by the machine's own python3
# (PYTHON overrides it) from the repository root, wherever it is called from.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exec "${PYTHON:-python3}" -m benchmarks.device.kit "$@"
