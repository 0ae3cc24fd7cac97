"""The sandbox: limits hold, nothing is written outside its folder, no process is left behind.

The issue's four cases (a tool that hangs, writes a file outside, prints 100 MB, raises) are answered to the
model through ToolEnvironment (tests/agents/test_tool_env.py shows the messages); here, what the process
could and could not do.
"""

import os

import pytest

from ftune.agents import sandbox
from ftune.agents.builtin_tools import Calculator, PythonTool
from ftune.agents.sandbox import SandboxLimits, run_python, runs_as_nobody

# Generous wall time where the case is not a timeout: a busy machine starts Python slowly.
LIMITS = SandboxLimits(time_limit_s=60.0, memory_mb=256, cpu_s=10, max_output_chars=1000)


def _gone(pid: int) -> bool:
    for probe in (lambda: os.kill(pid, 0), lambda: os.killpg(pid, 0)):
        try:
            probe()
            return False
        except ProcessLookupError:
            pass
    return True


def test_it_runs_code_in_its_own_folder_and_deletes_it():
    r = run_python(
        "import os; open('a.txt', 'w').write('hi'); print(os.getcwd()); print(open('a.txt').read())", LIMITS
    )
    folder, text = r.output.split()
    assert (r.status, r.returncode, text) == ("ok", 0, "hi")
    assert os.path.basename(folder).startswith("ftune-sandbox-") and not os.path.exists(folder)
    assert _gone(r.pid)


def test_a_hanging_tool_is_stopped_and_its_process_group_killed():
    r = run_python("print('start', flush=True)\nwhile True: pass", SandboxLimits(3.0, 256, 10, 1000))
    assert (r.status, r.returncode) == ("timeout", -9)
    assert r.output in ("start\n", "")  # what it printed before the kill is kept ("": not started yet)
    assert _gone(r.pid)


def test_a_sleeping_tool_is_stopped_too():
    r = run_python("import time; time.sleep(60)", SandboxLimits(0.5, 256, 10, 1000))
    assert r.status == "timeout" and _gone(r.pid)


def test_writes_outside_the_folder_are_refused(tmp_path):
    target = tmp_path / "outside.txt"
    (tmp_path / "keep.txt").write_text("keep")
    for code in (
        f"open({str(target)!r}, 'w').write('x')",
        f"import os; os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)",
        f"import os; os.remove({str(tmp_path / 'keep.txt')!r})",
        f"import os; os.rename({str(tmp_path / 'keep.txt')!r}, 'stolen.txt')",
        f"import pathlib; pathlib.Path({str(target)!r}).write_text('x')",
        f"import os; os.symlink({str(target)!r}, 'link'); open('link', 'w')",
    ):
        r = run_python(code, LIMITS)
        assert r.status == "error", (code, r)
        assert "PermissionError: sandbox:" in r.output and "outside the tool's folder" in r.output, r.output
    assert not target.exists() and (tmp_path / "keep.txt").read_text() == "keep"


def test_printing_100_mb_is_cut_while_reading(monkeypatch):
    read = []
    real_read = os.read
    monkeypatch.setattr(sandbox.os, "read", lambda fd, n: read.append(real_read(fd, n)) or read[-1])
    r = run_python("import sys\nfor _ in range(100): sys.stdout.write('x' * 2**20)", LIMITS)
    assert r.status == "output_cut" and r.output == "x" * 1000
    assert sum(map(len, read)) <= 4 * 1000 + 1024 + 65536  # never the 100 MB
    assert _gone(r.pid)


def test_an_exception_shows_the_tools_own_traceback():
    r = run_python("def f():\n    raise ValueError('bad input')\nf()", LIMITS)
    assert (r.status, r.returncode) == ("error", 1)
    assert r.output.startswith("Traceback (most recent call last):\n")
    assert 'File "<tool>", line 3' in r.output and r.output.endswith("ValueError: bad input\n")
    assert "<string>" not in r.output  # the sandbox's own frames are not shown


def test_no_network_no_process_no_proxy(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    for code, refusal in [("import socket", "importing socket"), ("import _socket", "importing _socket")]:
        r = run_python(code, LIMITS)
        assert r.status == "error" and f"sandbox: {refusal} is not allowed here" in r.output
    assert r.network in ("namespace", "audit hook")
    for code, event in [
        ("import subprocess", "importing subprocess"),
        ("import os; os.system('true')", "os.system"),
        ("import os; os.posix_spawn('/bin/true', ['true'], {})", "os.posix_spawn"),
        ("import os; os.fork()", "os.fork"),
    ]:
        r = run_python(code, LIMITS)
        assert f"sandbox: {event} is not allowed here" in r.output
    r = run_python("import os; print(sorted(os.environ))", LIMITS)
    assert r.output == "['HOME', 'LANG', 'PATH', 'TMPDIR']\n"


def test_the_namespace_has_no_interface_up_where_the_kernel_gives_one():
    r = run_python("print(open('/proc/net/dev').read())", LIMITS)
    if r.network != "namespace":
        pytest.skip("this kernel refuses unprivileged user namespaces: the audit hook guards sockets")
    interfaces = [line.split(":")[0].strip() for line in r.output.splitlines()[2:] if line.strip()]
    assert interfaces == ["lo"]


def test_memory_and_cpu_limits():
    r = run_python("x = bytearray(512 * 2**20)", LIMITS)
    assert r.status == "error" and r.output.endswith("MemoryError\n")
    r = run_python(
        "while True: pass", SandboxLimits(time_limit_s=30.0, memory_mb=256, cpu_s=1, max_output_chars=100)
    )
    assert r.status == "killed" and r.returncode == -24  # SIGXCPU
    assert _gone(r.pid)


def test_bad_limits_are_named():
    with pytest.raises(
        ValueError, match=r"sandbox.memory_mb must be an int >= 1, got 0. sandbox.time_limit_s must be"
    ):
        run_python("", SandboxLimits(time_limit_s=0, memory_mb=0, cpu_s=1, max_output_chars=1))
    with pytest.raises(
        ValueError, match=r"PythonTool.memory_mb is 32: Python needs about 30 MiB to start; give at least 64"
    ):
        PythonTool(memory_mb=32)


@pytest.mark.parametrize(
    ("expression", "answer"),
    [
        ("(12 + 30) * 2", "84"),
        ("7 / 2", "3.5"),
        ("sqrt(16) + 2**3", "12"),
        ("1/0", "error: division by zero"),
        ("9**9**9", "error: the exponent 387420489 is too large (at most 10000)"),
        ("__import__('os').system('true')", "error: \"__import__('os').system('true')\" is not arithmetic"),
        ("1 +", "error: '1 +' is not an arithmetic expression (invalid syntax)"),
    ],
)
def test_calculator(expression, answer):
    assert Calculator(time_limit_s=60.0)(expression).startswith(answer)


def test_python_tool_answers_the_model_with_what_happened():
    tool = PythonTool(time_limit_s=0.5, max_output_chars=20)
    assert tool("print(6 * 7)") == "42"
    assert tool("pass") == "(no output)"
    assert tool("while True: pass") == "[stopped: it ran longer than 0.5 s]"
    assert (
        tool("print('y' * 10**6)")
        == "y" * 20 + "\n[output cut: it printed more than 20 characters and was stopped]"
    )


def test_no_process_even_below_the_audit_hook():
    """_posixsubprocess.fork_exec raises no audit event: its import is refused (and, for any user but root,
    the kernel's RLIMIT_NPROC refuses the fork)."""
    code = (
        "import _posixsubprocess, os\n"
        "r, w = os.pipe()\n"
        "_posixsubprocess.fork_exec([b'/bin/true'], [b'/bin/true'], True, (w,), None, None, -1, -1, -1, -1, -1, -1,"
        " r, w, True, False, False, None, None, None, -1, None, False)\n"
        "print('forked')"
    )
    r = run_python(code, LIMITS)
    assert r.status == "error" and "forked" not in r.output
    assert "PermissionError: sandbox: importing _posixsubprocess is not allowed here" in r.output


def test_the_user_it_runs_as():
    r = run_python("pass", LIMITS)  # (inside its user namespace, os.getuid() reads 65534 whatever it is)
    assert r.uid == (65534 if runs_as_nobody() else os.getuid())
