"""The built-in tools: a calculator and a Python interpreter, each run in the sandbox (`ftune.agents.sandbox`).

Both are classes a config builds inside a :class:`~ftune.agents.ToolEnvironment`'s ``tools``::

    tools:
      - {_component_: ftune.agents.Calculator}
      - {_component_: ftune.agents.PythonTool, time_limit_s: 10, memory_mb: 512}

What they answer is text for the model: the printed output, or what went wrong (an exception's last
lines, the time or CPU limit, output cut), never an exception for the run.
"""

from __future__ import annotations

from ftune.agents.sandbox import SandboxLimits, SandboxResult, run_python

# The calculator's program, run in the sandbox with the expression as a literal: only numbers, + - * /
# // % **, parentheses and a few math functions are evaluated (an AST walk, never eval).
_CALCULATOR = r"""
import ast, math, operator as op
OPS = {ast.Add: op.add, ast.Sub: op.sub, ast.Mult: op.mul, ast.Div: op.truediv, ast.FloorDiv: op.floordiv,
       ast.Mod: op.mod, ast.Pow: op.pow, ast.USub: op.neg, ast.UAdd: op.pos}
FUNCS = {"sqrt": math.sqrt, "exp": math.exp, "log": math.log, "log10": math.log10, "log2": math.log2,
         "sin": math.sin, "cos": math.cos, "tan": math.tan, "floor": math.floor, "ceil": math.ceil,
         "factorial": math.factorial, "abs": abs, "round": round, "min": min, "max": max}
CONSTS = {"pi": math.pi, "e": math.e}
def ev(n):
    if isinstance(n, ast.Constant) and type(n.value) in (int, float):
        return n.value
    if isinstance(n, ast.BinOp) and type(n.op) in OPS:
        a, b = ev(n.left), ev(n.right)
        if isinstance(n.op, ast.Pow) and abs(b) > 10000:
            raise ValueError(f"the exponent {b} is too large (at most 10000)")
        return OPS[type(n.op)](a, b)
    if isinstance(n, ast.UnaryOp) and type(n.op) in OPS:
        return OPS[type(n.op)](ev(n.operand))
    if isinstance(n, ast.Name) and n.id in CONSTS:
        return CONSTS[n.id]
    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in FUNCS and not n.keywords:
        return FUNCS[n.func.id](*[ev(a) for a in n.args])
    raise ValueError(f"{ast.unparse(n)!r} is not arithmetic (numbers, + - * / // % **, parentheses, "
                     f"pi, e and {', '.join(FUNCS)})")
try:
    value = ev(ast.parse(EXPRESSION.strip(), mode="eval").body)
except SyntaxError as e:
    print(f"error: {EXPRESSION!r} is not an arithmetic expression ({e.msg})")
except (ValueError, ArithmeticError, TypeError) as e:
    print(f"error: {e}")
else:
    print(int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2**53 else value)
"""


def _answer(result: SandboxResult, limits: SandboxLimits) -> str:
    """The model's view of a sandboxed run: its output, and why it stopped if it did not finish."""
    text = result.output.rstrip("\n")
    note = {
        "timeout": f"[stopped: it ran longer than {limits.time_limit_s:g} s]",
        "output_cut": f"[output cut: it printed more than {limits.max_output_chars} characters and was stopped]",
        "killed": f"[killed by signal {-result.returncode}: the CPU limit is {limits.cpu_s} s]",
    }.get(result.status)
    if note:
        return f"{text}\n{note}" if text else note
    return text if text else "(no output)"


class _SandboxTool:
    own_time_limit = True  # ToolEnvironment leaves the time limit to the sandbox

    def __init__(
        self,
        *,
        time_limit_s: float = 5.0,
        memory_mb: int = 256,
        cpu_s: int = 5,
        max_output_chars: int = 4000,
        max_file_mb: int = 16,
    ) -> None:
        self.limits = SandboxLimits(time_limit_s, memory_mb, cpu_s, max_output_chars, max_file_mb)
        if problems := self.limits.problems(type(self).__name__):
            raise ValueError(" ".join(problems))


class Calculator(_SandboxTool):
    """The ``calculator`` tool: evaluates arithmetic in the sandbox.

    Args:
        time_limit_s: wall seconds a call may take (default 5).
        memory_mb: the process's address space, MiB (default 256).
        cpu_s: CPU seconds (default 5).
        max_output_chars: characters of output read (default 4000).
        max_file_mb: the largest file the process may write in its folder, MiB (default 16).
    """

    name = "calculator"

    def __call__(self, expression: str) -> str:
        """Evaluate an arithmetic expression and return its value.

        Args:
            expression: numbers with + - * / // % ** and parentheses, e.g. "(12 + 30) * 2"; sqrt, log, exp, sin,
                cos, tan, floor, ceil, factorial, abs, round, min, max, pi and e are known.
        """
        program = f"EXPRESSION = {expression!r}\n{_CALCULATOR}"
        return _answer(run_python(program, self.limits), self.limits)


class PythonTool(_SandboxTool):
    """The ``python`` tool: runs a program in the sandbox and returns what it prints.

    The standard library only; no network, no process, no file written outside its own temporary
    folder (`ftune.agents.sandbox` says what is guaranteed). Arguments as :class:`Calculator`'s.
    """

    name = "python"

    def __call__(self, code: str) -> str:
        """Run Python code and return what it prints (stdout and stderr).

        Args:
            code: a Python program; print the values you want to see.
        """
        return _answer(run_python(code, self.limits), self.limits)
