#!/usr/bin/env bash
# Runs the whole test suite once per Keras backend (jax, tensorflow, torch)
# and exits non-zero if any run fails. Extra arguments go to pytest.
# PYTHON selects the interpreter (default: python).
set -u
cd "$(dirname "$0")/.."
python_bin="${PYTHON:-python}"
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-3}"
status=0
for backend in jax tensorflow torch; do
  echo "=== KERAS_BACKEND=$backend"
  KERAS_BACKEND=$backend "$python_bin" -m pytest -n 2 -q -p no:cacheprovider "$@" \
    || status=1
done
if [ "$status" -ne 0 ]; then echo "FAILED on at least one backend"; fi
exit $status
