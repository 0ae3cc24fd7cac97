"""A game from the package index through agent GRPO: 2 steps from the shipped config
smollm2/135M_textarena_lora_grpo_agent on the tiny checkpoint, with the network refused: textarena deals each
game from its record's seed, plays the model's turns and scores the game with its own reward."""

import socket

import pytest
from test_grpo import col

import ftune.agents.textarena_env as textarena_env
from ftune.config import instantiate, load_config

pytest.importorskip("textarena")

AGENT, CONFIG = "lora_grpo_agent_single_device", "smollm2/135M_textarena_lora_grpo_agent"


@pytest.fixture
def no_network(monkeypatch):
    """Every connection attempt fails, as on a machine without a network."""

    def refuse(*args, **kwargs):
        raise OSError("network refused by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_the_shipped_config_names_the_game_and_its_rewards():
    cfg = load_config(CONFIG, [])
    assert cfg.environment._component_ == "ftune.agents.TextArenaEnvironment"
    assert cfg.environment.game == cfg.dataset.game == cfg.dataset_val.game == "GuessTheNumber-v0"
    assert cfg.dataset._component_ == "ftune.datasets.textarena_dataset"
    assert cfg.dataset.seed != cfg.dataset_val.seed
    rewards = instantiate(cfg.rewards)
    assert rewards.names == ["format"] and rewards.rewards["format"]("", "my guess: [7]", {}) == 1.0
    assert rewards.rewards["format"]("", "seven", {}) == 0.0


def test_two_steps_play_the_game_offline(run_recipe, tmp_path, monkeypatch, no_network):
    played = []
    real = textarena_env.TextArenaEpisode.step

    def spy(self, turn):
        step = real(self, turn)
        played.append((self.env.state.game_state["game_number"], turn.text, step))
        return step

    monkeypatch.setattr(textarena_env.TextArenaEpisode, "step", spy)
    logs, out = run_recipe(AGENT, CONFIG, "max_steps=2", output_dir=tmp_path / "r")
    assert len(col(logs, "loss")) == 2
    # the games' own engine answered the model's turns: 2 steps x 4 games x 4 conversations, 1 to 3 turns each
    assert 2 * 4 * 4 <= len(played) <= 2 * 4 * 4 * 3
    assert all(1 <= number <= 20 for number, _, _ in played)
    answers = [m["content"] for _, _, s in played for m in s.messages]
    assert answers and all(a.startswith("[GAME]") for a in answers)
    # a tiny random model guesses no number in brackets: the game ends at max_turns with reward 0
    assert all(s.reward == 0.0 for _, _, s in played)
    assert col(logs, "rewards/environment/mean") == [0.0, 0.0]
    assert (out / "step_2").is_dir()
