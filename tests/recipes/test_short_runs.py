"""A run shorter than the config's warm-up works: the warm-up is clamped with one warning line."""


def test_lora_max_steps_shorter_than_warmup_runs(run_recipe, caplog):
    # Shipped configs warm up over 10+ steps; `ftune run ... max_steps=2` is the natural smoke test.
    with caplog.at_level("WARNING", logger="ftune.training.step.schedulers"):
        logs, _ = run_recipe(
            "lora_finetune_single_device",
            "smollm2/135M_lora",
            "max_steps=2",
            "lr_scheduler.num_warmup_steps=10",
        )
    assert [row["step"] for row in logs if "loss" in row] == [1, 2]
    warnings = [r.getMessage() for r in caplog.records if r.name == "ftune.training.step.schedulers"]
    assert len(warnings) == 1 and "num_warmup_steps (10)" in warnings[0] and "(2)" in warnings[0], warnings
