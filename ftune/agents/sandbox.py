"""Run untrusted Python (a model's code, a calculator expression) in a separate, limited process.

`run_python(code, limits)` starts ``python -I -S`` (isolated: no user site, no ``PYTHON*`` variables,
no site packages: the standard library only) in a new session with its own temporary folder as cwd,
HOME and TMPDIR, and an environment of PATH, HOME, TMPDIR and LANG only (no proxies, no tokens). Before
the code runs, the child:

- if ftune runs as root, becomes ``nobody`` (uid and gid 65534, no groups) owning only its folder: root
  ignores ``RLIMIT_NPROC`` and every file permission. Only where ``nobody`` can read the standard
  library (`runs_as_nobody`): a Python under /root (mode 700) cannot be read, and there the child stays
  root and the audit hook alone refuses new processes and writes outside its folder;
- takes its own network namespace where the kernel lets an unprivileged user create one
  (``unshare(CLONE_NEWUSER | CLONE_NEWNET)``): then it has no network interface but a loopback that is
  down, so no connection can be made, from Python or from C; ``SandboxResult.network`` says
  ``"namespace"``. Where the kernel refuses, ``"audit hook"``: socket creation and use from Python
  are refused, which C code loaded by the standard library does not go through;
- sets resource limits: address space (``memory_mb``), CPU seconds, the largest file it may write
  (``max_file_mb``), no core files, and no new process (``RLIMIT_NPROC`` 0, which the kernel enforces
  for any user but root: a fork or thread fails);
- installs an audit hook (``sys.addaudithook``; it cannot be removed) that refuses: opening a file for
  writing, and removing, renaming, linking or changing files, outside its folder; sockets; starting
  processes (``subprocess``, ``os.system``, ``exec*``, ``fork``, ``posix_spawn``); signals to other
  processes; changing its resource limits; ``ctypes`` calls; importing the modules that start processes
  or open sockets below those events (``_posixsubprocess``, ``subprocess``, ``multiprocessing``,
  ``pty``, ``socket``); and the introspection that could reach the hook (``gc`` referrers, listing every
  object).

The parent reads the output as it comes, at most ``max_output_chars`` characters (4 bytes each at most):
a process that prints more is stopped there, so 100 MB are never read. After ``time_limit_s`` of wall
time the process is stopped. Whatever happens, the whole process group is killed (SIGKILL) and waited
for, and the folder deleted: no process is left behind.

What is not guaranteed: reads are not restricted (the child reads what the user running ftune, or
``nobody``, may read). For a non-root user the kernel lets the child write that user's own files, so
outside its folder only the audit hook stops writes: it stops the usual ways Python code writes files,
opens sockets or starts processes, but code written to defeat it (patching the standard library
modules the hook calls) is held only by the hard limits: the separate process, its resource limits,
the network namespace where the kernel gives one, and the kill of its process group.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# The child's program: limits, network, audit hook, then the code read from stdin.
_BOOTSTRAP = r"""
import json, os, resource, signal, sys
cfg = json.loads(sys.argv[1])
code = sys.stdin.read()
root = os.path.realpath(os.getcwd())
if cfg["as_nobody"]:  # root ignores RLIMIT_NPROC and file permissions: run as nobody, owning only its folder
    os.chown(root, 65534, 65534)
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
uid = os.getuid()  # read before unshare: inside a new user namespace an unmapped uid reads 65534
network = "audit hook"
try:
    import ctypes
    if ctypes.CDLL(None, use_errno=True).unshare(0x10000000 | 0x40000000) == 0:
        network = "namespace"
    del ctypes, sys.modules["ctypes"]
except Exception:
    pass
mem = cfg["memory_mb"] * 2**20
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_CPU, (cfg["cpu_s"], cfg["cpu_s"] + 1))  # SIGXCPU, then SIGKILL
fsize = cfg["max_file_mb"] * 2**20
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file past max_file_mb: an OSError, not a kill
sys.stdout.write(json.dumps({"network": network, "uid": uid}) + "\n")
sys.stdout.flush()
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_PATHS = {"os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.replace": (0, 1),
          "os.link": (0, 1), "os.symlink": (0, 1), "os.chmod": (0,), "os.chown": (0,), "os.truncate": (0,),
          "os.utime": (0,), "shutil.copyfile": (1,), "shutil.copytree": (1,), "shutil.rmtree": (0,),
          "shutil.move": (0, 1), "os.mkfifo": (0,), "os.mknod": (0,)}
_DENY = ("socket.", "subprocess.", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "resource.",
         "os.forkpty", "os.kill", "os.killpg", "signal.pthread_kill", "ctypes.", "gc.get_referrers",
         "gc.get_referents", "gc.get_objects", "os.chroot", "os.startfile", "pty.spawn", "webbrowser.open")
def _inside(path, root=root, realpath=os.path.realpath, fsdecode=os.fsdecode, sep=os.sep):
    if isinstance(path, int):
        return True  # an open descriptor: opening it was checked
    try:
        full = realpath(fsdecode(path))
    except Exception:
        return False
    return full == root or full.startswith(root + sep)
def _refuse(what):
    raise PermissionError(f"sandbox: {what} is not allowed here")
# modules that start processes or open sockets below the audit events (fork_exec raises none)
_NO_IMPORT = frozenset({"_posixsubprocess", "subprocess", "multiprocessing", "pty", "_socket", "socket"})
def _hook(event, args, _inside=_inside, _refuse=_refuse, _PATHS=_PATHS, _DENY=_DENY, _WRITE=_WRITE,
          _NO_IMPORT=_NO_IMPORT):
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (flags or 0) & _WRITE
        if writes and not _inside(path):
            _refuse(f"writing {path!r} (outside the tool's folder)")
    elif event in _PATHS:
        for i in _PATHS[event]:
            if i < len(args) and not _inside(args[i]):
                _refuse(f"{event} on {args[i]!r} (outside the tool's folder)")
    elif event.startswith(_DENY):
        _refuse(event)
    elif event == "import" and args[0] in _NO_IMPORT:
        _refuse(f"importing {args[0]}")
sys.addaudithook(_hook)
del _hook, _inside, _refuse, _PATHS, _DENY, _WRITE, _NO_IMPORT, root, uid, json, resource, cfg, mem, fsize, network
try:
    exec(compile(code, "<tool>", "exec"), {"__name__": "__main__"})
except SystemExit:
    raise
except BaseException as e:  # the traceback of the tool's own frames: the sandbox's are noise to the model
    import traceback
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != "<string>"]
    sys.stdout.flush()
    sys.stderr.write("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)))
    sys.stderr.write("".join(traceback.format_exception_only(type(e), e)))
    sys.exit(1)
"""


@dataclass(frozen=True)
class SandboxLimits:
    """The limits of one sandboxed run.

    Attributes:
        time_limit_s: wall-clock seconds before the process is killed.
        memory_mb: its address space (RLIMIT_AS), MiB; Python itself needs about 30.
        cpu_s: CPU seconds (RLIMIT_CPU).
        max_output_chars: characters of output read; past them the process is stopped.
        max_file_mb: the largest file it may write in its folder, MiB.
    """

    time_limit_s: float
    memory_mb: int
    cpu_s: int
    max_output_chars: int
    max_file_mb: int = 16

    def problems(self, key: str) -> list[str]:
        """What is wrong with the limits, one message each (`key`: the config section)."""
        out = []
        for name in ("memory_mb", "cpu_s", "max_output_chars", "max_file_mb"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                out.append(f"{key}.{name} must be an int >= 1, got {v!r}.")
        t = self.time_limit_s
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < float("inf"):
            out.append(f"{key}.time_limit_s must be a number of seconds > 0, got {t!r}.")
        if not out and self.memory_mb < 64:
            out.append(
                f"{key}.memory_mb is {self.memory_mb}: Python needs about 30 MiB to start; give at least 64."
            )
        return out


@dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed run gave.

    Attributes:
        output: its stdout and stderr, interleaved, at most ``max_output_chars`` characters.
        status: ``"ok"`` (exit 0), ``"error"`` (exit status != 0: an exception, a refused operation,
            the memory limit), ``"timeout"``, ``"output_cut"`` (stopped for printing too much), or
            ``"killed"`` (by a signal: the CPU limit).
        returncode: the process's exit status (negative: the signal).
        network: ``"namespace"`` or ``"audit hook"`` (see the module docstring); ``""`` if it died first.
        uid: the user id the code ran as (65534: ``nobody``; -1 if it died first).
        pid: the process id (gone when this returns).
    """

    output: str
    status: str
    returncode: int
    network: str
    uid: int
    pid: int


def _others_can_read(path: str) -> bool:
    """Whether a user other than the owner reaches `path` (every folder on the way searchable) and reads it."""
    try:
        mode = os.stat(path).st_mode
        folders = [p for p in [Path(path), *Path(path).parents] if p.is_dir()]
        return bool(mode & stat.S_IROTH) and all(os.stat(p).st_mode & stat.S_IXOTH for p in folders)
    except OSError:
        return False


def runs_as_nobody() -> bool:
    """Whether the child drops to ``nobody``: ftune runs as root and ``nobody`` can read the standard
    library (a Python installed under /root, mode 700, cannot be: the child then stays root, and the
    audit hook alone refuses processes and writes)."""
    paths = sysconfig.get_paths()
    return os.geteuid() == 0 and all(_others_can_read(paths[k]) for k in ("stdlib", "platstdlib"))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: the group id is the child's pid
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def run_python(code: str, limits: SandboxLimits) -> SandboxResult:
    """Run `code` in a sandboxed Python process (see the module docstring); never raises for the code's faults.

    Raises:
        ValueError: limits that :meth:`SandboxLimits.problems` refuses.
    """
    if problems := limits.problems("sandbox"):
        raise ValueError(" ".join(problems))
    folder = tempfile.mkdtemp(prefix="ftune-sandbox-")
    env = {"PATH": "/usr/bin:/bin", "HOME": folder, "TMPDIR": folder, "LANG": "C.UTF-8"}
    cfg = {"memory_mb": limits.memory_mb, "cpu_s": limits.cpu_s, "max_file_mb": limits.max_file_mb}
    cfg["as_nobody"] = runs_as_nobody()
    max_bytes = 4 * limits.max_output_chars + 1024  # the header line and UTF-8's widest characters
    chunks: list[bytes] = []
    size, status = 0, ""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-B", "-c", _BOOTSTRAP, json.dumps(cfg)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=folder,
        env=env,
        start_new_session=True,
        close_fds=True,
    )
    deadline = time.monotonic() + limits.time_limit_s
    try:
        try:
            proc.stdin.write(code.encode("utf-8", "surrogatepass"))  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
        except BrokenPipeError:
            pass  # it died before reading: its output says why
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    status = "timeout"
                    break
                if not sel.select(timeout=left):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)  # type: ignore[union-attr]
                if not chunk:
                    break  # end of output: the process closed it (exited)
                chunks.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    status = "output_cut"
                    break
        if not status:  # the output ended: wait for the exit, within the time left
            try:
                proc.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                status = "timeout"
    finally:
        _kill_group(proc)
        proc.stdout.close()  # type: ignore[union-attr]
        shutil.rmtree(folder, ignore_errors=True)
    raw = b"".join(chunks)
    header, _, body = raw.partition(b"\n")
    try:
        info = json.loads(header)
        network, uid = info["network"], info["uid"]
    except (ValueError, KeyError, TypeError):
        network, uid, body = "", -1, raw
    text = body.decode("utf-8", "replace")
    if status == "output_cut" or len(text) > limits.max_output_chars:
        status = "output_cut"
        text = text[: limits.max_output_chars]
    if not status:
        rc = proc.returncode
        status = "ok" if rc == 0 else "killed" if rc < 0 else "error"
    return SandboxResult(
        output=text, status=status, returncode=proc.returncode, network=network, uid=uid, pid=proc.pid
    )
