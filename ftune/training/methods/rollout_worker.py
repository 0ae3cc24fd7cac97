"""The generation side of rollouts beside training: a sampler that holds its own copy of the policy.

:class:`RolloutSampler` is the interface the off-policy loader (``ftune.training.OffPolicyLoader``) talks
to, four calls: ``refresh`` (the policy's trainable weights after some step), ``submit`` (a prompt batch to
sample, answered in submission order), ``result`` and ``close``. :class:`ProcessSampler` is ftune's own: a
separate process (spawned, so it shares no state with the trainer) that holds a deep copy of the policy
and runs the recipe's sample function on it (``training.TrajectorySampler``: multi-turn conversations on
the KV cache). Messages are handled in order, so a prompt batch submitted before a refresh is sampled
with the weights before it, however busy the process is: which weights sampled which batch depends on
the order of the calls only, never on timing.

An OpenAI-compatible server (vLLM, llama.cpp's ``llama-server``) is the other place this interface is
meant for: ``refresh`` would load the weights (vLLM's weight-update endpoint, or a LoRA adapter by path),
``submit`` send each conversation's turns as ``/v1/completions`` requests asking for the sampled tokens'
logprobs, ``result`` assemble them into ``Trajectories``. None runs on the test machines, so none is
built here.
"""

from __future__ import annotations

import copy
import traceback
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.multiprocessing as mp
from torch import nn

from ftune.data.prompt_batch import PromptBatch

#: How long ``result`` waits for the process before it says the worker is stuck (seconds).
RESULT_TIMEOUT_S = 3600.0


class RolloutSampler(Protocol):
    """Samples rollouts of prompt batches with a copy of the policy that is refreshed on request."""

    def refresh(self, weights: dict[str, torch.Tensor], version: int) -> None: ...

    def submit(self, prompts: PromptBatch, epoch: int) -> None: ...

    def result(self) -> tuple[int, Any]: ...

    def close(self) -> None: ...


def trainable_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """The weights a refresh sends: the trainable parameters (LoRA: the adapters), detached copies."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _serve(conn: Any, model: nn.Module, sample: Callable[..., Any], threads: int) -> None:
    """The worker process: apply refreshes and sample submitted batches, in the order they came."""
    torch.set_num_threads(threads)
    version = 0
    params = dict(model.named_parameters())
    while True:
        kind, *payload = conn.recv()
        if kind == "stop":
            return
        try:
            if kind == "weights":
                weights, version = payload
                with torch.no_grad():
                    for name, value in weights.items():
                        params[name].copy_(value)
            else:
                prompts, epoch = payload
                conn.send(("ok", version, sample(model, prompts, epoch=epoch)))
        except Exception:  # the trainer raises it with the worker's traceback
            conn.send(("error", version, traceback.format_exc()))


class ProcessSampler:
    """A spawned process holding a deep copy of `model`, sampling with `sample(model, prompts, epoch=...)`.

    Args:
        model: the policy (its current weights are version 0 of the copy).
        sample: a picklable callable (``training.TrajectorySampler``); it runs in the worker process.

    The process is a daemon and is stopped by :meth:`close` (or when the trainer exits).
    """

    def __init__(self, model: nn.Module, sample: Callable[..., Any]) -> None:
        context = mp.get_context("spawn")
        self.conn, child = context.Pipe()
        copied = copy.deepcopy(model).eval()
        for p in copied.parameters():
            p.requires_grad_(False)
        self.process = context.Process(
            target=_serve, args=(child, copied, sample, torch.get_num_threads()), daemon=True
        )
        self.process.start()
        child.close()
        self.submitted = 0

    def refresh(self, weights: dict[str, torch.Tensor], version: int) -> None:
        self.conn.send(("weights", weights, version))

    def submit(self, prompts: PromptBatch, epoch: int) -> None:
        self.conn.send(("sample", prompts, epoch))
        self.submitted += 1

    def result(self) -> tuple[int, Any]:
        """(the weights version that sampled it, the rollout) of the oldest batch not yet returned.

        Raises:
            RuntimeError: the worker raised (its traceback in the message) or did not answer in time.
        """
        if not self.conn.poll(RESULT_TIMEOUT_S):
            raise RuntimeError(
                f"the rollout worker process (pid {self.process.pid}) returned nothing in {RESULT_TIMEOUT_S:g} s "
                f"(alive: {self.process.is_alive()}); it may be stuck in an environment's step."
            )
        status, version, value = self.conn.recv()
        if status == "error":
            raise RuntimeError(f"the rollout worker process failed while sampling:\n{value}")
        return version, value

    def close(self) -> None:
        if self.process.is_alive():
            try:
                self.conn.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
            self.process.join(timeout=10)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()
        self.conn.close()
