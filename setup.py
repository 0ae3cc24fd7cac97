"""Package layout that pyproject.toml cannot express alone.

recipes/ sits at the top of a checkout (CONTRIBUTING.md, "The layout") and installs as the package `ftune._recipes`,
so an installed (non-editable) ftune finds the same recipes and configs as a checkout. Each config
folder is listed as a (data-only) package of its own: setuptools warns about importable folders
that hold files but are not declared. (package_data lives here, not in pyproject.toml, whose
[tool.setuptools.package-data] would replace this argument.)
"""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
CONFIG_DIRS = sorted(p for p in (HERE / "recipes" / "configs").rglob("*") if p.is_dir())
CONFIG_PACKAGES = ["ftune._recipes.configs"] + [
    "ftune._recipes.configs." + ".".join(p.relative_to(HERE / "recipes" / "configs").parts)
    for p in CONFIG_DIRS
]

setup(
    packages=[
        *find_packages(include=["ftune", "ftune.*"], exclude=["ftune._recipes*"]),
        "ftune._recipes",
        *CONFIG_PACKAGES,
    ],
    package_dir={"ftune._recipes": "recipes"},
    package_data={
        "ftune": ["py.typed"],
        "ftune._recipes": ["*.py"],
        **{name: ["*.yaml"] for name in CONFIG_PACKAGES},
    },
)
