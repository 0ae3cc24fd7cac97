import sys
from pathlib import Path

from ftune.config.trust import trust_packages

# Makes tests/agents/sample_tools.py and vf_guess_game.py importable (tool paths, a verifiers env id) and
# trusts them for the process, as `--trust sample_tools,vf_guess_game` would.
sys.path.insert(0, str(Path(__file__).parent))
trust_packages(["sample_tools", "vf_guess_game"])
