#!/usr/bin/env bash
# The GPU run of issue 38 in one call, from the repository's root: the CUDA tests (`pytest -m cuda`, at most
# 150 s) then benchmarks/gpu.py (its figures, a budget of 340 s, stopped at 380 s), everything they print under
# $OUT (out/gpu when OUT is unset): pytest-cuda.txt, gpu.txt, gpu.json, gpu.md, nvidia-smi.txt.
#
# The GPU machine's python3 has torch, torchvision, h5py, click, numpy, pillow, tqdm, scipy, matplotlib, pytest,
# but not nltk (which tokenising needs; a pure-Python wheel, whose own needs are there). So, first, here:
#     bash benchmarks/gpu.sh wheels        # downloads nltk's wheel into benchmarks/.wheels (git ignores it)
# then on the GPU machine (the device tool's run, with carry ["benchmarks/.wheels"]):
#     bash benchmarks/gpu.sh               # or `bash benchmarks/gpu.sh --dry-run`: tiny sizes, on any machine
# Arguments other than `wheels` go to gpu.py (--dry-run, --sections, --budget...). PYTHON picks the interpreter
# (python3 by default).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=benchmarks/.wheels
if [ "${1:-}" = wheels ]; then
    exec "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --dest "$WHEELS" "nltk>=3.8"
fi
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export OUT PYTHONUNBUFFERED=1
if ! "$PY" -c "import nltk" 2>/dev/null; then
    if ! ls "$WHEELS"/nltk-*.whl >/dev/null 2>&1; then
        echo "gpu.sh: nltk is not installed and $WHEELS holds no nltk wheel: run 'bash benchmarks/gpu.sh wheels'" \
             "where pip reaches PyPI, and carry $WHEELS" | tee "$OUT/gpu.txt"
        exit 1
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/vltools-site "$WHEELS"/nltk-*.whl || exit 1
    export PYTHONPATH=/tmp/vltools-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
# the project runs from source: `vltools` on PATH is `python3 -m vltools`
mkdir -p /tmp/vltools-bin
printf '#!/bin/sh\nexec %s -m vltools "$@"\n' "$(command -v "$PY")" >/tmp/vltools-bin/vltools
chmod +x /tmp/vltools-bin/vltools
export PATH=/tmp/vltools-bin:$PATH
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || echo "no nvidia-smi here" >"$OUT/nvidia-smi.txt"
echo "gpu.sh: pytest -m cuda (at most 150 s)"
timeout 150 "$PY" -m pytest -p no:cacheprovider -q -rs -m cuda tests/test_cuda.py >"$OUT/pytest-cuda.txt" 2>&1
echo "gpu.sh: pytest exit status $? (124: stopped at 150 s); its last lines:"
tail -n 25 "$OUT/pytest-cuda.txt"
echo "gpu.sh: benchmarks/gpu.py (budget 340 s, stopped at 380 s)"
timeout 380 "$PY" benchmarks/gpu.py --out "$OUT" "$@" | grep -v '^{'   # its last line, all in one JSON: gpu.json
echo "gpu.sh: gpu.py exit status ${PIPESTATUS[0]} (124: stopped at 380 s)"
echo "gpu.sh: pytest -m cuda: $(tail -n 1 "$OUT/pytest-cuda.txt")"
