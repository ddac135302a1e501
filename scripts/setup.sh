#!/usr/bin/env bash
# One-step install into .venv: torch (CPU build unless one is already importable),
# triton for the interpreter (numpy < 2.3 is what Triton 3.6's interpreter needs),
# and KernelEvo itself in editable mode with its test tools (mypy pinned: its checks
# change between releases) and Dask distributed (the cluster extra, whose tests
# start a scheduler and workers on this machine).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
pip=".venv/bin/python -m pip"
$pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  # KERNELEVO_TORCH picks another build; the default is the CPU wheel CI uses.
  $pip install -q "${KERNELEVO_TORCH:-torch==2.13.0}"
fi
# Triton as on the GPU machines (3.6); its interpreter needs numpy < 2.3.
$pip install -q -e ".[triton,test,cluster]" "${KERNELEVO_TRITON:-triton==3.6.0}" "numpy<2.3" \
  "distributed==2026.8.0" "mypy==2.4.1"
# The web UI's browser tests drive Debian's Chromium through Playwright (no
# browser download); install it where we may, the tests skip where it is absent.
if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
     --no-install-recommends chromium >/dev/null) || echo "chromium not installed: browser tests will skip"
fi
echo "installed: $(.venv/bin/python -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)')"
