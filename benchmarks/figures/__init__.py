"""The docs' figures, rendered from benchmarks/results/*.json: `python benchmarks/figures/report.py`.

report.py names every generated block of README.md and docs/ and the function that renders it; the
other modules hold those functions (common.py: reading a results file, tables, provenance). The
measurements themselves are the scripts one folder up (benchmarks/README.md lists them).
"""
