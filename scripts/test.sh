#!/usr/bin/env bash
# The test command (README): set up the environment if needed, then ruff and the whole suite.
# FTUNE_VENV picks another environment folder (CI uses a fresh one). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup_env.sh
ruff check .
ruff format --check .
python -m pytest "$@"
