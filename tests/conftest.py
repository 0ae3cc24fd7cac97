import sys

import pytest

# The test helper modules used as `_component_` paths (tests/config/ftune_test_targets.py,
# tests/assets/recipe_test_components.py) are trusted by the conftest.py that puts their folder on
# sys.path (`trust_packages`), not through FTUNE_TRUST: a name there that a subprocess cannot import
# (its PYTHONPATH lacks the folder) is an error.


def pytest_addoption(parser):
    parser.addoption(
        "--update-goldens", action="store_true", help="rewrite tests/recipes/goldens/*.json from this run"
    )


# Under pytest-xdist (scripts/test.sh runs `-n 2 --dist loadgroup`), tests are sent to workers in
# groups: one per module, split by the `recipe` parameter where a test has one, so that each
# torchrun launch (module-scoped in tests/recipes/test_distributed.py) and each module's fixtures
# are built once, on one worker. The launches go first: they are the longest groups.
def _group(item) -> str:
    params = getattr(getattr(item, "callspec", None), "params", {})
    recipe = params.get("recipe")
    return item.module.__name__ + (f"[{recipe}]" if isinstance(recipe, str) else "")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(_group(item)))
    items.sort(key=lambda item: 0 if item.get_closest_marker("distributed") else 1)  # stable


@pytest.fixture(scope="module")
def one_thread():
    """`pytestmark = pytest.mark.usefixtures("one_thread")`: the module's tests run on one thread.

    Small forwards gain little from a second OpenMP thread, and on busy shared cores its spin-waiting
    made them up to ~10x slower. Restored after the module."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def golden_threads():
    """One thread for one test that compares with recorded losses (tests/recipes/goldens): they were
    recorded at one thread (scripts/test.sh), and a reduction split over another number of threads may
    round its last bits otherwise, whatever OMP_NUM_THREADS or pytest-xdist the suite runs under."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _no_process_group_left():
    """A test that leaves torch.distributed's default group behind would make every later test in its
    process (an xdist worker runs hundreds) see a world it did not start: destroy it after the test."""
    yield
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
