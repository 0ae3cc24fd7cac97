"""Every fenced bash and python block of README.md and docs/ runs (tests/docs/doc_runner.py says how).

One test runs them all, in document order, in one workspace of tiny stand-ins (one tiny checkpoint,
one-step runs), so that the whole check stays under a minute; it prints what happened to each
command. A failure names the file and line of the block.
"""

import importlib.util
import os

import pytest
import torch
from doc_blocks import OTHER_LANGS, RUN_LANGS, Block, blocks, script, shell_lines
from doc_runner import REPORTS, Workspace, chdir_env, make_outputs, summary
from tiny_checkpoint import SIZES, make_tiny_checkpoint, tiny_overrides

from ftune import registry

BLOCKS = blocks()


def load_recipe(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_recipe_{name}", registry.RECIPES[name].file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_block_has_a_known_language():
    unknown = [f"{b.where}: ```{b.lang}" for b in BLOCKS if b.lang not in (*RUN_LANGS, *OTHER_LANGS)]
    assert not unknown, (
        f"label each block bash or python (run) or one of {OTHER_LANGS} (shown):\n" + "\n".join(unknown)
    )


def test_marks_and_placeholders_are_known():
    for block in BLOCKS:
        if block.lang == "bash":
            shell_lines(block)  # raises on an unknown `# needs:` or placeholder


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    ws = Workspace(tmp_path_factory.mktemp("docs"), SIZES, tiny_overrides)
    ws.setup()
    make_tiny_checkpoint(ws.model)
    make_outputs(ws, load_recipe)
    return ws


def test_every_bash_and_python_block_runs(workspace):
    ran = [b for b in BLOCKS if b.lang in RUN_LANGS]
    assert len(ran) >= 30, "the docs lost most of their commands?"
    for index, block in enumerate(ran):
        if block.lang == "bash":
            workspace.run_bash(block, index)
        else:
            cwd = workspace.block_dir(block, index)
            with chdir_env(cwd, workspace.env):
                try:
                    exec(compile(block.text, block.where, "exec"), {"__name__": "__docs__"})
                except Exception as e:
                    raise AssertionError(f"{block.where}: the python block fails: {e!r}") from e
            workspace.tally["python blocks run"] += 1
    REPORTS.append(summary(workspace, BLOCKS))
    assert workspace.tally["validated and run on the tiny model"] >= 8
    assert os.environ.get("FTUNE_HOME") != str(workspace.ftune_home)  # the environment was restored
    assert not torch.distributed.is_initialized()  # the distributed recipes' world of one was torn down


def test_marks_placeholders_and_the_generated_script():
    block = Block(
        "x.md", 3, "bash", "ftune run <recipe> --config <config>\nftune download a/b  # needs: network\n"
    )
    assert [(line.text, line.needs) for line in shell_lines(block)] == [
        ("ftune run lora_finetune_single_device --config smollm2/135M_lora", None),
        ("ftune download a/b", "network"),
    ]
    assert "__ftune_docs_marked 'network' ftune download a/b" in script(block)
    whole = Block(
        "x.md", 3, "bash", "# needs: several machines\nMASTER=$(scontrol show x)\nsrun ftune run r\n"
    )
    assert script(whole).splitlines()[1:] == [
        "MASTER=__needs_several_machines__",
        "__ftune_docs_marked 'several machines' srun ftune run r",
    ]
    with pytest.raises(ValueError, match=r"x.md:3: `# needs: a laptop` is not one of"):
        shell_lines(Block("x.md", 3, "bash", "ftune ls  # needs: a laptop\n"))
    with pytest.raises(ValueError, match=r"x.md:3: placeholders \['<model>'\] have no value"):
        shell_lines(Block("x.md", 3, "bash", "ftune cat <model>\n"))


def test_a_misspelt_key_in_a_documented_command_fails(tmp_path):
    from ftune.config.errors import ConfigError

    ws = Workspace(tmp_path, SIZES, tiny_overrides)
    ws.setup()
    block = Block("docs/x.md", 7, "bash", "")
    argv = ["ftune", "run", "lora_finetune_single_device", "--config", "smollm2/135M_lora", "max_step=5"]
    with pytest.raises(ConfigError, match="max_step"):
        ws.command(block, argv, "gpu", tmp_path)  # marked: validated only, and validation fails
    with pytest.raises(AssertionError, match="downloads need `# needs: network`"):
        ws.command(block, ["ftune", "download", "a/b"], None, tmp_path)
