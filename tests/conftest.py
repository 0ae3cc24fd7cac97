def pytest_addoption(parser):
    parser.addoption(
        "--update-goldens", action="store_true", help="rewrite tests/recipes/goldens/*.json from this run"
    )
