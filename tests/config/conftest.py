import sys
from pathlib import Path

# Makes tests/config/ftune_test_targets.py importable as `ftune_test_targets` (for _component_ paths).
sys.path.insert(0, str(Path(__file__).parent))
