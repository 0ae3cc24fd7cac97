"""A verifiers (0.4, `verifiers.v1`) environment package for the adapter's tests: guess a number.

verifiers 0.4 ships its multi-turn tasksets (textarena, openenv, nemo_gym, harbor) only with extra
packages and downloads, so this module builds one offline from verifiers' own classes, the way a
verifiers environment package does: a Taskset, its Task (a @vf.reward scores the trace), and an Env
whose run() is the game loop: each model reply is a guess, the game answers "higher" or "lower" as
the next user turn, and a right guess ends the exchange.
"""

import re

import verifiers.v1 as vf


class GuessData(vf.TaskData):
    secret: int


class GuessTask(vf.Task[GuessData, vf.State, vf.TaskConfig]):
    @vf.reward
    async def solved(self, task, trace) -> float:
        return float(trace.info.get("solved", False))

    @vf.reward(weight=0.1)
    async def fewer_turns(self, task, trace) -> float:
        return 1.0 / max(1, trace.num_turns)


class GuessConfig(vf.TasksetConfig):
    size: int = 4
    high: int = 10


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    def load(self):
        for i in range(self.config.size):
            secret = (7 * i + 3) % self.config.high + 1
            yield GuessTask(
                GuessData(
                    prompt=f"Guess my number between 1 and {self.config.high}. Reply with one number.",
                    system_prompt="You play a guessing game.",
                    secret=secret,
                ),
                self.config.task,
            )


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                found = re.findall(r"-?\d+", segment.last_reply)
                if not found:
                    reply = "Reply with one number."
                elif int(found[-1]) == task.data.secret:
                    interaction.trace.info["solved"] = True
                    break
                else:
                    reply = "higher" if int(found[-1]) < task.data.secret else "lower"
                segment = await interaction.turn(reply)


__all__ = ["GuessEnv", "GuessTaskset"]
