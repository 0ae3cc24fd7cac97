"""Bad-input cases of issue 37 item 3: only what ftune wrote is deleted or overwritten.

Run by bad_inputs.py inside its own namespace (`_c`, `CASES`, `SETUPS`, `_write`, `LORA` come from
there), so the catalogue stays one list: where a file goes (the rule `ftune cp` and `ftune export`
share), metric logs in a model folder, and a step folder ftune did not write.
"""

# fmt: off
CASES += [  # noqa: F821
    _c('cp-trailing-slash-missing-folder', 'outputs', ('cp', 'dist_check', '{tmp}/newdir/'), "ends in '/', so it names a folder", "dest '{tmp}/newdir/'", "nor write a file called 'newdir'", 'mkdir -p {tmp}/newdir'),  # noqa: F821
    _c('cp-dangling-symlink', 'outputs', ('cp', 'dist_check', '{tmp}/link.py', '--force'), 'ftune never writes through a link, even with --force', "dest '{tmp}/link.py'", 'which does not exist (a dangling link)', 'Remove the link', 'dangling_link'),  # noqa: F821
    _c('cp-onto-folder', 'outputs', ('cp', 'dist_check', '{tmp}', '--force'), 'is a folder; ftune writes a file there only if nothing is in the way', "dest '{tmp}/dist_check.py'", 'dist_check.py', 'Give another destination', 'folder_in_the_way'),  # noqa: F821
    _c('cp-through-file', 'outputs', ('cp', 'dist_check', '{tmp}/notes.txt/x.py', '--make-parents'), 'is a file, not a folder, so nothing can be written below it', "dest '{tmp}/notes.txt/x.py'", '{tmp}/notes.txt', 'Give a path whose folders are folders', 'notes_file'),  # noqa: F821
    _c('export-missing-parent', 'outputs', ('export', 'gguf', '{ckpt}', '{tmp}/a/b/m.gguf', '--type', 'f16'), 'does not exist; ftune does not create folders unasked', "output '{tmp}/a/b/m.gguf'", 'the folder {tmp}/a/b', 'Create it with `mkdir -p {tmp}/a/b`, or pass --make-parents'),  # noqa: F821
    _c('export-dangling-symlink', 'outputs', ('export', 'gguf', '{ckpt}', '{tmp}/m.gguf', '--type', 'f16', '--force'), 'ftune never writes through a link', "output '{tmp}/m.gguf'", 'a dangling link', 'Remove the link', 'dangling_gguf'),  # noqa: F821
    _c('metric-log-in-model-folder', 'outputs', (*LORA, 'metric_logger.log_dir={ckpt}/logs'), 'ftune never writes where it reads a model', 'metric_logger.log_dir', "'{ckpt}/logs' (set on the command line) is inside checkpointer.checkpoint_dir", 'metric_logger.log_dir=${output_dir}/logs'),  # noqa: F821
    _c('step-folder-not-ftunes', 'outputs', (*LORA, 'max_steps=1'), 'a folder ftune did not write', "'{tmp}/out/step_1'", 'does not record it and it has no .complete marker', 'Move that folder out of the output folder', 'users_step_folder'),  # noqa: F821
]
# fmt: on


def _link(path, target):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


SETUPS.update(  # noqa: F821
    {
        "dangling_link": lambda tmp, ckpt: _link(tmp / "link.py", tmp / "nowhere.py"),
        "dangling_gguf": lambda tmp, ckpt: _link(tmp / "m.gguf", tmp / "elsewhere.gguf"),
        "folder_in_the_way": lambda tmp, ckpt: (tmp / "dist_check.py").mkdir(),
        "notes_file": lambda tmp, ckpt: _write(tmp / "notes.txt", "my notes"),  # noqa: F821
        "users_step_folder": lambda tmp, ckpt: _write(tmp / "out" / "step_1" / "notes.md", "what I tried"),  # noqa: F821
    }
)
