#!/usr/bin/env bash
# Runs the whole test suite once per Keras backend (jax, tensorflow, torch)
# and exits non-zero if any run fails. Extra arguments go to pytest. Each
# run prints its ten slowest tests and its wall time: the whole command has
# a 35-minute budget on the 2-core CI machine.
# PYTHON selects the interpreter (default: python).
set -u
cd "$(dirname "$0")/.."
python_bin="${PYTHON:-python}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
status=0
for backend in jax tensorflow torch; do
  echo "=== KERAS_BACKEND=$backend"
  start=$(date +%s)
  KERAS_BACKEND=$backend "$python_bin" -m pytest -n 2 -q -p no:cacheprovider \
    --durations=10 "$@" || status=1
  echo "=== KERAS_BACKEND=$backend took $(( $(date +%s) - start )) s"
done
if [ "$status" -ne 0 ]; then echo "FAILED on at least one backend"; fi
exit $status
