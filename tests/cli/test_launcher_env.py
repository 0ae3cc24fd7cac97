"""`ftune run` with torchrun options, called in-process, gives its caller its environment back.

torchrun sets OMP_NUM_THREADS=1 in the launching process's own environment. Left there, a later run
in the same process (a notebook, a test session) saw a setting nobody made: a resume, which honours
OMP_NUM_THREADS, continued at 1 thread from a folder saved at 2 and its losses differed in the last
bits (issue 46, in the one-process suite).
"""

import os
import socket

from ftune.cli.main import main


def test_an_in_process_launch_leaves_the_environment_as_it_was(monkeypatch, capsys):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    with socket.socket() as busy:  # the launch fails at its rendezvous, after torchrun set its variables
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        code = main(["run", "--nproc_per_node", "2", "--master_port", port, "dist_check"])
    assert code == 1 and "could not start" in capsys.readouterr().err
    assert "OMP_NUM_THREADS" not in os.environ
