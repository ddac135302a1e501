#!/usr/bin/env bash
# Installs what bench/kb_harness.py needs and the GPU machine lacks (pydantic and
# its dependencies, as wheels carried in .whl/) into .kbdeps. Nothing else sees
# .kbdeps: bench/kernelbench_l1.py passes it to kb_harness.py alone (--deps),
# which puts it first on sys.path. No network is needed (--no-index).
set -euo pipefail
cd "$(dirname "$0")/../.."
shopt -s nullglob
wheels=(.whl/*.whl)
if [ ${#wheels[@]} -eq 0 ]; then
    echo "setup_device.sh: no wheels in .whl/ (carry .whl); kb_harness will use its pydantic stand-in" >&2
    exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target .kbdeps "${wheels[@]}"
PYTHONPATH=.kbdeps python3 -c "import pydantic; print('kbdeps: pydantic', pydantic.VERSION)"
