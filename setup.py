"""Package layout that pyproject.toml cannot express alone.

recipes/ sits at the top of a checkout (DESIGN.md) and installs as the package `ftune._recipes`,
so an installed (non-editable) ftune finds the same recipes and configs as a checkout.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["ftune", "ftune.*"]), "ftune._recipes"],
    package_dir={"ftune._recipes": "recipes"},
)
