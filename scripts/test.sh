#!/usr/bin/env bash
# The test command (README): set up the environment if needed, then ruff and the whole suite.
# FTUNE_VENV picks another environment folder (CI uses a fresh one). Extra arguments go to pytest.
# The suite runs on two pytest-xdist workers, in groups (tests/conftest.py); FTUNE_TEST_WORKERS=0
# runs it in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
ruff check .
ruff format --check .
# One thread per worker: two workers on two cores, and a second OpenMP thread per process only
# spin-waits on a busy core (tiny models). Set OMP_NUM_THREADS to override.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
python -m pytest -n "${FTUNE_TEST_WORKERS:-2}" --dist loadgroup "$@"
