import sys
from pathlib import Path

from ftune.config.trust import trust_packages

# Makes tests/agents/sample_tools.py importable as `sample_tools` (tool paths in the tests' configs) and
# trusts it for the process, as `--trust sample_tools` would.
sys.path.insert(0, str(Path(__file__).parent))
trust_packages(["sample_tools"])
