import importlib.util
import sys
from pathlib import Path

import pytest

_NAME = "ftune_tests_fake_tokenizer"
if _NAME not in sys.modules:  # loaded by path: the tests folders are not packages
    _spec = importlib.util.spec_from_file_location(_NAME, Path(__file__).with_name("fake_tokenizer.py"))
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_NAME])


@pytest.fixture
def tokenizer():
    return sys.modules[_NAME].FakeTokenizer()


_VISION = "ftune_tests_vision_assets"  # images drawn with Pillow, a tokenizer with image tokens
if _VISION not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_VISION, Path(__file__).with_name("vision_assets.py"))
    sys.modules[_VISION] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_VISION])
