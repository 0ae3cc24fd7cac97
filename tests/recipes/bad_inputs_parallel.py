"""Bad-input cases of tensor and context parallel (issue 43 item 3): a grid that does not divide the world
size, a recipe without the split, both at once, LoRA with tensor parallel.

Run by bad_inputs.py inside its own namespace (`_c`, `CASES`, `V` come from there), so the catalogue
stays one list.
"""
# ruff: noqa: F821  (names of bad_inputs.py, which runs this file in its namespace)

# fmt: off
CASES += [  # noqa: F821
    _c('launch-mesh-world-size', 'launches', ('run', '--nproc_per_node', '3', 'full_finetune_distributed', 'tensor_parallel_dim=2'), 'does not divide the world size', 'tensor_parallel_dim=2', '(3 processes)', 'Launch a multiple of 2 processes'),  # noqa: F821
    _c('launch-split-unsupported', 'launches', ('run', '--nproc_per_node', '2', 'qat_distributed', '--config', 'smollm2/135M_qat_full', 'tensor_parallel_dim=2'), 'does not run it', 'tensor_parallel_dim', '2 (set on the command line)', 'run it with full_finetune_distributed'),  # noqa: F821
    _c('launch-tp-with-peft', 'launches', ('run', '--nproc_per_node', '2', 'reward_model_distributed', '--config', 'smollm2/135M_demo_lora_rm', 'tensor_parallel_dim=2'), 'with a peft section', 'tensor_parallel_dim', '2 (set on the command line)', 'Set tensor_parallel_dim=1'),  # noqa: F821
    _c('value-tp-and-cp', 'values', ('validate', 'smollm2/135M_full', 'tensor_parallel_dim=2', 'context_parallel_dim=2'), 'one of the two at a time', 'tensor_parallel_dim', 'context_parallel_dim=2', 'Set one of them to 1'),  # noqa: F821
    _c('value-tp-with-lora', 'values', (*V, 'tensor_parallel_dim=2'), 'with LoRA', 'tensor_parallel_dim', '2', 'Set tensor_parallel_dim=1'),  # noqa: F821
]
# fmt: on
