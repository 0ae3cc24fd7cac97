"""Instruments the feature checks use to see a feature's effect inside a recipe run.

Each is a context manager around one or more `run(...)` calls. They patch library or torch
objects (never a recipe file), so they work the same on every recipe, in-process on one device
and inside the torchrun driver of the distributed recipes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ftune.modules.transformer import TransformerDecoder


@contextlib.contextmanager
def models_run() -> Iterator[list[nn.Module]]:
    """Yield a list that collects every decoder that runs a forward (`hidden`), in order of first use.

    The recipe builds its model inside `main`; this is how a check gets hold of it (the last one
    is the model of the last run). FSDP2 wraps `hidden` per instance by looking it up on the
    class, so the spy sees sharded models too.
    """
    seen: list[nn.Module] = []
    real = TransformerDecoder.hidden

    def hidden(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not any(m is self for m in seen):
            seen.append(self)
        return real(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TransformerDecoder, "hidden", hidden)
        yield seen


@contextlib.contextmanager
def saved_activation_bytes() -> Iterator[list[int]]:
    """Yield a one-item list holding the bytes autograd saved for backward (outside checkpointed regions).

    Counted with `torch.autograd.graph.saved_tensors_hooks`: every tensor a forward op saves for
    its backward passes through the pack hook. Non-reentrant activation checkpointing installs
    its own, innermost hooks around a checkpointed layer, so what the layer would have saved never
    reaches this one: the count drops by the layers' activations.
    """
    total = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield total


class LargestVocabTensor(TorchDispatchMode):
    """Records the largest fp32 tensor of shape (..., vocab) that any op allocates.

    Views and in-place ops allocate nothing and are skipped (a transposed (dim, vocab) view of the
    output weight is not a logits tensor). `rows` is the tensor's size divided by `vocab`: the
    number of token positions whose fp32 logits (or log-probabilities, or their gradient) existed
    at once.
    """

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.rows = 0
        self._probing = False

    def __enter__(self):
        # The dtype advice at start-up (ftune.training.resolve_dtype) times one product of the
        # output projection's shape, [tokens, vocab], before training: not the loss's logits.
        from ftune.training.run import dtype_advice

        self._measure = dtype_advice.measure_speed

        def unwatched(*args, **kwargs):
            self._probing = True
            try:
                return self._measure(*args, **kwargs)
            finally:
                self._probing = False

        dtype_advice.measure_speed = unwatched
        return super().__enter__()

    def __exit__(self, *exc):
        from ftune.training.run import dtype_advice

        dtype_advice.measure_speed = self._measure
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view or func._schema.is_mutable or self._probing:
            return out
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.dim() >= 1:
                if t.shape[-1] == self.vocab:
                    self.rows = max(self.rows, t.numel() // self.vocab)
        return out


@dataclass
class CompiledTarget:
    """One `torch.compile` call: its target, how often it was called, and how many compiled graphs
    ran inside those calls (forward graphs; their backward graphs run later, in backward)."""

    target: Any
    calls: int = 0
    runs: int = 0


@contextlib.contextmanager
def torch_compile(backend: str) -> Iterator[list[CompiledTarget]]:
    """Patch `torch.compile` so every call compiles with `backend` behind a counting wrapper.

    Yields a list with one `CompiledTarget` per `torch.compile` call: its target (the module of a
    bound method such as `layer._call_impl` or `loss.chunk_loss`, else the callable), and the
    compiled graphs that ran during its calls. A graph that ran proves the code executed
    compiled, not just that `torch.compile` was called. One backend object serves every call, so
    identical layers share one compiled graph, as they do with the default backend.

    Dynamo's caches are reset first: a graph compiled by an earlier test for the same code would
    otherwise be reused without passing through this backend.
    """
    import torch._dynamo

    real_compile = torch.compile
    compiler = torch._dynamo.lookup_backend(backend)
    graph_runs = [0]
    records: list[CompiledTarget] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        compiled = compiler(gm, example_inputs)

        def run(*args: Any) -> Any:
            graph_runs[0] += 1
            return compiled(*args)

        # As the backend's own result: not traced by dynamo, same calling convention.
        run = torch._dynamo.disable(run)
        if getattr(compiled, "_boxed_call", False):
            run._boxed_call = True  # called with one list of inputs
        return run

    def spy(model=None, **kwargs):
        record = CompiledTarget(getattr(model, "__self__", model))
        records.append(record)
        kwargs.pop("mode", None)
        compiled = real_compile(model, **{**kwargs, "backend": counting})

        def call(*args: Any, **kw: Any) -> Any:
            before = graph_runs[0]
            out = compiled(*args, **kw)
            record.calls += 1
            record.runs += graph_runs[0] - before
            return out

        return call

    torch._dynamo.reset()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "compile", spy)
        yield records
    torch._dynamo.reset()


@dataclass
class BackwardCall:
    """The trainable parameters right after one `Tensor.backward()` of a training step."""

    grads_left: int  # trainable parameters that still hold a gradient
    params_changed: int  # trainable parameters whose value changed during this backward
    params: int  # trainable parameters


@contextlib.contextmanager
def backward_calls(models: list[nn.Module]) -> Iterator[list[BackwardCall]]:
    """Record, after every `Tensor.backward()`, the state of the trainable parameters of the last model of
    `models` that has any (a frozen reference, teacher or reward model that ran later is skipped).

    Use inside `models_run()` (which fills `models`): the model exists once its first forward ran,
    which is before its first backward.
    """
    calls: list[BackwardCall] = []
    real = torch.Tensor.backward

    def backward(self: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        trained = [m for m in models if any(p.requires_grad for p in m.parameters())]
        params = [p for p in trained[-1].parameters() if p.requires_grad] if trained else []
        before = [p.detach().clone() for p in params]
        real(self, *args, **kwargs)
        changed = sum(not torch.equal(b, p.detach()) for b, p in zip(before, params))
        calls.append(BackwardCall(sum(p.grad is not None for p in params), changed, len(params)))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.Tensor, "backward", backward)
        yield calls
