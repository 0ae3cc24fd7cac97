import sys
from pathlib import Path

from ftune.config.trust import trust_packages

# Makes tests/config/ftune_test_targets.py importable as `ftune_test_targets` (for _component_ paths),
# and trusts it for the process, as `--trust ftune_test_targets` would.
sys.path.insert(0, str(Path(__file__).parent))
trust_packages(["ftune_test_targets"])
