"""A verifiers environment (verifiers 0.4, ``verifiers.v1``) as an ftune Environment.

verifiers 0.4 writes a multi-turn environment as an ``Env`` whose ``run(task, agents)`` is the
exchange's control flow: ``agents.<role>.interaction(task)`` opens a conversation and each
``await interaction.turn(message)`` sends the environment's message and returns the model's reply
(a ``Segment``); a task's ``@vf.reward`` methods then score the trace. Here ftune's rollout is the
model: the adapter runs ``run()`` as a coroutine, suspends it at each ``turn()``, hands the message
to the rollout as a ``user`` message, and resumes it with the model's reply. When ``run()`` returns,
verifiers' own scoring (``Task.score``) records the rewards on a real ``vf.Trace``, and their
weighted sum (``trace.reward``) is the last step's reward (earlier steps give 0)::

    environment:
      _component_: ftune.agents.VerifiersEnvironment
      env: my_vf_env          # the environment package (module) verifiers would load by that id
      taskset: {size: 100}    # the taskset's own settings
      max_turns: 6

What it supports: environments with one agent role (the policy) whose ``run()`` awaits only that
agent's turns (TextArena-style game loops, checkers that answer each reply); the task's rewards that
need no runtime box. Not bridged: verifiers' harnesses, MCP toolsets and sandboxes (use
:class:`~ftune.agents.ToolEnvironment` for tools), multi-agent envs (a simulated user is a second
model), ``Env.setup``/``finalize`` hooks. The environment's module is code: it must be trusted like a
``_component_`` (``--trust my_vf_env``). verifiers is an optional dependency (``ftune[agents]``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ftune.agents.environment import EnvStep, Message, Turn
from ftune.config.errors import ConfigError
from ftune.config.instantiate import resolve
from ftune.config.trust import UntrustedComponentError


def _vf() -> Any:
    try:
        import verifiers.v1
    except ImportError:
        raise ImportError(
            "VerifiersEnvironment needs the verifiers package (0.4), which is not installed; install it with "
            "pip install 'ftune[agents]' (or pip install verifiers)."
        ) from None
    return verifiers.v1


class _Suspend:
    """What ``interaction.turn(message)`` awaits: the driver receives `message`, sends back a Segment."""

    def __init__(self, message: str | None) -> None:
        self.message = message

    def __await__(self):  # noqa: ANN204 - a generator-based awaitable
        return (yield self)


class _Interaction:
    """verifiers' ``Interaction`` as the environment's ``run()`` uses it: ``turn`` and ``trace``."""

    def __init__(self, trace: Any) -> None:
        self.trace = trace

    async def turn(self, message: Any = None) -> Any:
        return await _Suspend(message)

    async def __aenter__(self) -> _Interaction:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _Agent:
    trainable = True

    def __init__(self, trace: Any) -> None:
        self._trace = trace

    def interaction(self, task: Any) -> _Interaction:
        return _Interaction(self._trace)


class VerifiersEnvironment:
    """Runs a verifiers environment's episodes with ftune's model (see the module docstring).

    Args:
        env: the id verifiers loads the environment by: an installed environment package's module name.
        max_turns: the most model turns an episode has (>= 1); at the limit the environment's next
            ``turn()`` gets a terminated segment, as verifiers' own turn limit gives.
        taskset: the taskset's settings (its config's fields), besides ``id``.

    Raises:
        ConfigError: the module is not trusted or does not import, or the environment declares more
            than one agent.
    """

    tools: list[dict[str, Any]] = []  # verifiers' toolsets are not bridged

    def __init__(self, env: str, *, max_turns: int, taskset: Mapping[str, Any] | None = None) -> None:
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"environment.max_turns must be an int >= 1, got {max_turns!r}.")
        try:
            resolve(env, "environment.env")  # trust first: verifiers' loader imports it by name
        except UntrustedComponentError as e:
            raise ConfigError([str(e)]) from None
        except ImportError as e:
            raise ConfigError(
                [f"environment.env: cannot import the verifiers environment {env!r}: {e}"]
            ) from None
        vf = _vf()
        config = vf.resolve_env_config({"taskset": {"id": env, **dict(taskset or {})}})
        self.env = vf.load_environment(config)
        roles = list(self.env._agent_specs)
        if len(roles) != 1:
            raise ConfigError(
                [
                    f"environment.env: {env!r} declares the agents {roles}; VerifiersEnvironment plays one (the policy)."
                ]
            )
        self.role, self.max_turns, self.name = roles[0], max_turns, env
        self._tasks: dict[int, Any] = {}

    def records(self, size: int) -> list[dict[str, Any]]:
        """The first `size` tasks of the environment's taskset as records (their wire data) for `start`."""
        out = []
        for task in self.env.taskset:
            if len(out) == size:
                break
            out.append(task.data.model_dump(mode="json"))
        return out

    def start(self, record: Mapping[str, Any]) -> tuple[list[Message], VerifiersEpisode]:
        vf = _vf()
        task_cls = type(self.env.taskset).task_type()
        task = task_cls(task_cls.data_type().model_validate(dict(record)), self.env.taskset.config.task)
        trace = vf.Trace(
            task=vf.TraceTask(type=task_cls.__name__, data=task.data),
            agent=vf.AgentInfo(config=self.env._agent_specs[self.role], name=self.role),
        )
        messages: list[Message] = []
        if task.data.system_prompt:
            messages.append({"role": "system", "content": task.data.system_prompt})
        prompt = task.data.prompt
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt:
            messages += [m.model_dump(exclude_none=True) for m in prompt]
        episode = VerifiersEpisode(self, task, trace, messages)
        return episode.opening(), episode


class VerifiersEpisode:
    """One verifiers episode, its ``run()`` suspended at the agent's next turn."""

    def __init__(self, owner: VerifiersEnvironment, task: Any, trace: Any, messages: list[Message]) -> None:
        self.owner, self.task, self.trace, self.turns = owner, task, trace, 0
        self._messages = messages
        for m in messages:
            self._node(m, sampled=False)
        agents = _vf().Agents(owner.env.config, make=lambda name, cfg: _Agent(trace))
        self._run = owner.env.run(task, agents)
        self._pending = self._advance(None)

    def _node(self, message: Message, sampled: bool) -> None:
        vf = _vf()
        cls = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}[
            message["role"]
        ]
        parent = len(self.trace.nodes) - 1 if self.trace.nodes else None
        self.trace.nodes.append(
            vf.MessageNode(parent=parent, message=cls(content=message["content"]), sampled=sampled)
        )

    def _advance(self, value: Any) -> _Suspend | None:
        """Resume ``run()`` with `value` until its next ``turn()`` (None: it returned)."""
        try:
            request = self._run.send(value)
        except StopIteration:
            return None
        if not isinstance(request, _Suspend):
            self._run.close()
            raise RuntimeError(
                f"the verifiers environment {self.owner.name!r} awaited {request!r} in run(); VerifiersEnvironment "
                "drives environments whose run() awaits only the agent's turns."
            )
        return request

    def opening(self) -> list[Message]:
        """The messages before the model's first turn (the task's prompt; a first ``turn(message)``'s text)."""
        if self._pending is not None and self._pending.message is not None:
            message = {"role": "user", "content": str(self._pending.message)}
            self._node(message, sampled=False)
            return [*self._messages, message]
        return list(self._messages)

    def _finish(self) -> EnvStep:
        self.trace.is_completed = self.trace.ok = True
        asyncio.run(self.task.score(self.trace))  # verifiers' own scoring: @vf.reward methods, weights
        return EnvStep(messages=[], reward=float(self.trace.reward), done=True)

    def step(self, turn: Turn) -> EnvStep:
        vf = _vf()
        self.turns += 1
        if self._pending is None:
            return self._finish()
        self._node({"role": "assistant", "content": turn.text}, sampled=True)
        self._pending = self._advance(vf.Segment(messages=[vf.AssistantMessage(content=turn.text)]))
        while self._pending is not None and self.turns >= self.owner.max_turns:
            self.trace.stop("max_turns")  # as verifiers' own limit: the next turn() is terminated
            self._pending = self._advance(vf.Segment(messages=[], terminated=True))
        if self._pending is None:
            return self._finish()
        message = {"role": "user", "content": str(self._pending.message or "")}
        self._node(message, sampled=False)
        return EnvStep(messages=[message], reward=0.0, done=False)
