import os

# The test helper modules used as `_component_` paths (tests/config/ftune_test_targets.py,
# tests/assets/recipe_test_components.py) are trusted the documented way: FTUNE_TRUST, which
# subprocesses (ftune run, torchrun ranks) inherit.
os.environ["FTUNE_TRUST"] = ",".join(
    filter(None, [os.environ.get("FTUNE_TRUST", ""), "ftune_test_targets", "recipe_test_components"])
)


def pytest_addoption(parser):
    parser.addoption(
        "--update-goldens", action="store_true", help="rewrite tests/recipes/goldens/*.json from this run"
    )
