def test_full(run_recipe):
    logs, out = run_recipe("full_finetune_single_device", "smollm2/135M_full", "max_steps=4")
    print(logs)
    assert len([l for l in logs if "loss" in l]) == 4


def test_lora(run_recipe):
    logs, out = run_recipe("lora_finetune_single_device", "smollm2/135M_lora", "max_steps=4")
    print(logs)
    assert len([l for l in logs if "loss" in l]) == 4
