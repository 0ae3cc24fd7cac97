"""A tool's JSON schema equals transformers' get_json_schema of the same function."""

import pytest
import sample_tools
from transformers.utils import get_json_schema

from ftune.agents.tool_schema import SchemaError, function_schema


@pytest.mark.parametrize("name", ["add", "describe", "no_args", "loud", "fails", "sleeps"])
def test_schema_equals_transformers(name):
    fn = getattr(sample_tools, name)
    assert function_schema(fn) == get_json_schema(fn)


def test_a_missing_hint_or_docstring_line_is_an_error_naming_the_argument():
    with pytest.raises(SchemaError, match=r"tool untyped, argument 'x': it has no type hint; annotate it"):
        function_schema(sample_tools.untyped)

    def nodoc(y: int) -> int:
        """Nothing about y."""
        return y

    with pytest.raises(
        SchemaError, match=r"argument 'y': the docstring's Args: section does not describe it"
    ):
        function_schema(nodoc)


def test_an_unsupported_type_is_named():
    def bad(x: set) -> int:
        """Bad.

        Args:
            x: a set.
        """
        return 0

    with pytest.raises(SchemaError, match=r"tool bad, argument 'x': type <class 'set'> has no JSON schema"):
        function_schema(bad)
