"""The states of a feature-matrix cell: what a recipe's entry says about one feature.

The shared cells (`ftune.registry.cells`) are written with these; docs/recipes/index.md renders them
(`ftune.registry.docs`). Pure Python, no torch.
"""

from __future__ import annotations

# The states of a (recipe, feature) cell. YES is a promise kept by tests: the feature has a check
# of its effect, run on one device in the default test run, and a mutant that makes the check fail;
# `pytest -m matrix` runs the rest of the proof (every check at world size 2, every mutant:
# tests/recipes/test_mutation.py, test_distributed.py). The other states carry their reason after the prefix:
# NA cannot apply to the recipe; GPU_ONLY has an effect on a GPU only; UNCHECKED runs in the recipe
# (its lines are there) but no check of its effect runs on that recipe, so it is not a promise either.
YES = "yes"
NA = "n/a"
GPU_ONLY = "gpu-only"
UNCHECKED = "not checked"
_PREFIXED = (NA, GPU_ONLY, UNCHECKED)


def na(reason: str) -> str:
    """Mark a feature "not applicable" to a recipe, with the reason (shown in the feature matrix)."""
    return f"{NA}: {reason}"


def gpu_only(reason: str) -> str:
    """Mark a feature that only has an effect on a GPU: the CPU machines the tests run on cannot check it,
    so it is never shown as ✓. The reason is shown in the feature matrix."""
    return f"{GPU_ONLY}: {reason}"


def unchecked(reason: str) -> str:
    """Mark a feature that runs in a recipe but whose effect no test checks on a run of that recipe:
    never shown as ✓, and not "n/a" either (it applies). The reason is shown in the feature matrix."""
    return f"{UNCHECKED}: {reason}"


def state(value: str) -> str:
    """The state of a cell: YES, NA, GPU_ONLY, UNCHECKED, or "" for a feature the recipe does not declare."""
    if value == YES:
        return YES
    for prefix in _PREFIXED:
        if value.startswith(f"{prefix}: "):
            return prefix
    return ""


def reason(value: str) -> str:
    """The reason of an NA, GPU_ONLY or UNCHECKED cell ("" for the others)."""
    return value.split(": ", 1)[1] if state(value) in _PREFIXED else ""
