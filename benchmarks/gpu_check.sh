#!/usr/bin/env bash
# gradtui on a CUDA GPU, in one command (at most 8 minutes), on a machine that may have no network:
#
#     benchmarks/gpu_wheels.sh        # beforehand, where there is network: the wheels, into benchmarks/wheels/
#     benchmarks/gpu_check.sh         # on the GPU machine, from the repository root or anywhere
#
# 1. installs what the machine may lack (textual, msgspec, textual-plotext, plotext, textual-serve,
#    their dependencies, the test tools) from benchmarks/wheels/ with no index, and gradtui itself
#    (`--no-deps -e .`); torch with CUDA, networkx, rich and aiohttp are assumed present;
# 2. builds the compiled posthooks against that machine's torch (python -m gradtui.engine.hooks.native);
# 3. runs benchmarks/gpu_check.py: the CUDA rows (benchmarks/bench_cuda.py) and the CUDA tests
#    (tests/cuda: the NaN culprit, an OpInfo sample in every mode), and writes one report,
#    gpu_report.md (git-ignored), with every figure and the tests' outcome.
#
# Without CUDA it runs to its end, says so, skips the CUDA rows (the tests skip) and exits 0.
# Options: --dry-run (print the install and build steps instead of running them; the report says
# what was found), --report PATH. Environment: PYTHON (default python), GRADTUI_WHEELS (the wheels
# folder). Exit status: 0, or 1 when a step failed or a CUDA test failed.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python}
WHEELS=${GRADTUI_WHEELS:-$ROOT/benchmarks/wheels}
REPORT=$ROOT/gpu_report.md
DRY=""
while (($#)); do
    case "$1" in
        --dry-run) DRY=1 ;;
        --report) shift; REPORT=$1 ;;
        *) echo "gpu_check: unknown option $1 (--dry-run, --report PATH)" >&2; exit 2 ;;
    esac
    shift
done
cd "$ROOT" || exit 1
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"  # gradtui from this checkout even if the editable install fails
BEGAN=$(date +%s)
step() {  # run (or, dry, print) a step under a time limit; its failure is reported, not fatal
    local limit=$1; shift
    echo "gpu_check: $*"
    [[ -n $DRY ]] && return 0
    timeout "$limit" "$@"
}
NOTES=()
if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "gpu_check: $PY cannot import torch: install torch (with CUDA) first" >&2
    exit 1
fi
PACKAGES=(textual textual-plotext plotext msgspec textual-serve aiohttp-jinja2 numpy "setuptools>=77"
          pytest pytest-timeout pytest-xdist pytest-asyncio expecttest hypothesis)
if [[ -z $DRY ]] && ! compgen -G "$WHEELS/*.whl" >/dev/null; then
    echo "gpu_check: no wheels in $WHEELS (make them with benchmarks/gpu_wheels.sh); installing only what is missing from nothing" >&2
fi
step 180 "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" -c "$ROOT/constraints.txt" "${PACKAGES[@]}" \
    || NOTES+=("install from $WHEELS failed (exit $?): the checks below ran with what was there")
step 120 "$PY" -m pip install --quiet --no-index --find-links "$WHEELS" --no-deps --no-build-isolation -e "$ROOT" \
    || NOTES+=("gradtui's editable install failed (exit $?): gradtui ran from PYTHONPATH=$ROOT")
step 300 "$PY" -m gradtui.engine.hooks.native \
    || NOTES+=("the compiled posthooks were not built (exit $?): the Python posthooks ran")
LEFT=$((480 - ($(date +%s) - BEGAN)))
ARGS=(--report "$REPORT" --seconds "$LEFT")
[[ -n $DRY ]] && ARGS+=(--dry-run)
for note in "${NOTES[@]}"; do ARGS+=(--note "$note"); done
timeout $((LEFT > 30 ? LEFT : 30)) "$PY" "$ROOT/benchmarks/gpu_check.py" "${ARGS[@]}"
status=$?
echo "gpu_check: report in $REPORT ($(( $(date +%s) - BEGAN )) s)"
exit $status
