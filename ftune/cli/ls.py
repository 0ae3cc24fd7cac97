"""`ftune ls`: recipes and their configs; `--features` adds the feature matrix. Never imports torch."""

from __future__ import annotations

import argparse

from ftune import registry

_CELL = {
    registry.YES: "✓",
    registry.NA: "n/a",
    registry.GPU_ONLY: "gpu-only",
    registry.UNCHECKED: "not checked",
    "": "",
}


def feature_matrix() -> list[list[str]]:
    """Rows of the feature matrix: header, then one row per feature (✓, n/a, gpu-only, not checked, or blank)."""
    names = list(registry.RECIPES)
    rows = [["feature", *names]]
    for feature in registry.FEATURES:
        row = [feature]
        for name in names:
            row.append(_CELL[registry.state(registry.RECIPES[name].features.get(feature, ""))])
        rows.append(row)
    return rows


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ftune ls", description="List recipes and their configs.")
    parser.add_argument("--features", action="store_true", help="show which features each recipe supports")
    args = parser.parse_args(argv)
    rows = [["RECIPE", "CONFIGS"]]
    for recipe in registry.RECIPES.values():
        configs = recipe.configs
        label = recipe.name + (" (distributed)" if recipe.distributed else "")
        for i, cfg in enumerate(configs):
            mark = " (default)" if cfg == recipe.default_config else ""
            rows.append([label if i == 0 else "", cfg + mark])
    print(_table(rows))
    if args.features:
        print()
        print(_table(feature_matrix()))
        print(
            "\n✓: supported (checked by a test of its effect in the training recipes). n/a: not applicable to that recipe. gpu-only: has an "
            "effect on GPU machines only, not checked by the (CPU) test suite. not checked: runs in that recipe, but "
            "no test checks its effect there. Reasons: docs/recipes/index.md; "
            "features: docs/glossary.md"
        )
    return 0
