"""The agent demo's task: seeded word problems, traces that call the calculator the way the environment answers."""

import json

from ftune.agents import Calculator, ToolEnvironment
from ftune.agents.tool_formats import FORMATS
from ftune.datasets.tool_demo import (
    HELDOUT_FILE,
    SFT_FILE,
    SYSTEM_PROMPT,
    TRAIN_FILE,
    generate_tool_tasks,
    tool_trace,
    write_tool_demo_data,
)


def test_tasks_are_seeded_distinct_and_exact():
    tasks = generate_tool_tasks(40, seed=3)
    assert tasks == generate_tool_tasks(40, seed=3) and tasks != generate_tool_tasks(40, seed=4)
    assert len({t.expression for t in tasks}) == 40
    for t in tasks:
        assert t.answer == str(eval(t.expression)) and int(t.answer) > 0  # noqa: S307
        assert t.prompt.endswith("Answer with the number only.")
    assert tasks[0].prompt.startswith("A box holds ") and tasks[2].expression.count("*") == 2


def test_the_trace_is_what_the_calculator_environment_answers():
    task = generate_tool_tasks(1, seed=0)[0]
    trace = tool_trace(task)
    assert [m["role"] for m in trace] == ["system", "user", "assistant", "tool", "assistant"]
    env = ToolEnvironment(
        tools=[Calculator()],
        prompt_field="prompt",
        max_turns=3,
        max_output_chars=500,
        system_prompt=SYSTEM_PROMPT,
    )
    opening, episode = env.start({"prompt": task.prompt})
    assert opening == trace[:2]
    step = episode.step(FORMATS["hermes"].parse(trace[2]["content"]))
    assert [(m["role"], m["content"]) for m in step.messages] == [("tool", trace[3]["content"])]
    assert trace[4]["content"] == task.answer


def test_written_files_keep_heldout_questions_out_of_training(tmp_path):
    out = write_tool_demo_data(tmp_path / "d", n_sft=30, n_train=30, n_heldout=20, seed=1)
    read = lambda name: [json.loads(line) for line in (out / name).read_text().splitlines()]  # noqa: E731
    sft, train, heldout = read(SFT_FILE), read(TRAIN_FILE), read(HELDOUT_FILE)
    assert (len(sft), len(train), len(heldout)) == (30, 30, 20)
    held = {r["prompt"] for r in heldout}
    assert not held & {r["prompt"] for r in train} and not held & {r["messages"][1]["content"] for r in sft}
    assert set(heldout[0]) == {"prompt", "answer"} and sft[0]["messages"][0]["content"] == SYSTEM_PROMPT
