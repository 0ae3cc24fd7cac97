"""The image-text generate and eval configs of scripts/make_configs.py: one `generation` config a
family with published weights (SmolVLM-256M-Instruct, Gemma 3 4B, Llama 3.2 11B Vision), and
SmolVLM's `eval` on the image task's held-out questions.

The folder is read whole (``checkpointer.image_text: true``) and sized by its config.json; the image
transform is the family's with its processor's published defaults (``image_transform: null``), the
one the training configs name.
"""

from __future__ import annotations

from pathlib import Path

# (config, title, model folder name, hub id, tokenizer max_seq_len)
GENERATION = (
    ("smolvlm/256M_generation", "SmolVLM-256M-Instruct", "HuggingFaceTB/SmolVLM-256M-Instruct", 8192),
    ("gemma3/4B_generation", "gemma-3-4b-it", "google/gemma-3-4b-it", 8192),
    (
        "llama3_2_vision/11B_generation",
        "Llama-3.2-11B-Vision-Instruct",
        "meta-llama/Llama-3.2-11B-Vision-Instruct",
        8192,
    ),
)
_IMAGE = "~/Pictures/photo.jpg"


def _model(folder: str, repo: str, max_seq_len: int) -> str:
    return (
        "\n# model: none: config.json sizes the image-text model (vision encoder, projector, text decoder)\n"
        "image_transform: null  # the family's, with its processor's published defaults\n"
        "tokenizer:\n"
        "  _component_: ftune.tokenizers.HFTokenizer\n"
        f"  path: ${{ftune_home:}}/models/{folder}\n"
        f"  max_seq_len: {max_seq_len}\n"
        "checkpointer:\n"
        "  _component_: ftune.checkpointing.HFCheckpointer\n"
        f"  checkpoint_dir: ${{ftune_home:}}/models/{folder}\n"
        f"  hf_repo_id: {repo}\n"
        "  image_text: true  # read the folder whole: vision encoder, projector and text decoder\n"
    )


def generation(name: str, folder: str, repo: str, max_seq_len: int) -> str:
    """<family>/<size>_generation: generate with images (local files) on the KV cache."""
    return (
        f"# {folder}: generate from a prompt with images (local files), KV-cache decoding.\n"
        "#\n"
        "# Get the weights (to $FTUNE_HOME/models, default ~/.cache/ftune/models):\n"
        f"#   ftune download {repo}\n"
        "# Run:\n"
        f'#   ftune run generate --config {name} images=[{_IMAGE}] prompt="What is in this image?"\n'
        "prompt: null  # required: the user message, after the images\n"
        "images: []  # local image files, shown before the prompt in the user's turn\n"
        "system: null\n"
        "chat: true\n"
        "adapter_dir: null  # a LoRA/DoRA step folder of this model, merged into it\n"
        "quantized_checkpoint: null\n"
        "max_new_tokens: 256\n"
        "temperature: 0.0  # 0: greedy\n"
        "top_k: null\n"
        "top_p: null\n"
        "seed: 0\n"
        "device: cpu  # cpu, cuda, mps or auto\n"
        "dtype: fp32\n"
        + _model(folder, repo, max_seq_len)
        + "  output_dir: output/generate  # unused: generate writes no checkpoint\n"
    )


def smolvlm_eval() -> str:
    """smolvlm/256M_eval: exact match on the image task's held-out questions, with their images."""
    folder, repo = "SmolVLM-256M-Instruct", "HuggingFaceTB/SmolVLM-256M-Instruct"
    return (
        "# SmolVLM-256M-Instruct: exact match on the image task's held-out questions (with their images).\n"
        "#\n"
        "# Get the weights (to $FTUNE_HOME/models, default ~/.cache/ftune/models):\n"
        f"#   ftune download {repo}\n"
        "# The image task is written by the smolvlm training configs on first use. Run:\n"
        "#   ftune run eval --config smolvlm/256M_eval\n"
        "#   ftune run eval --config smolvlm/256M_eval adapter_dir=output/smolvlm_256M_lora/step_100\n"
        "text_files: []\n"
        "heldout_file: ${ftune_home:}/data/image_task/heldout.jsonl  # chats with image parts\n"
        "demo_data_if_missing: false  # the text demo's data is no image task\n"
        "max_new_tokens: null  # the longest reference's tokens + 4\n"
        "batch_size: 8  # prompts answered together, each with its images\n"
        "limit: null\n"
        "show_examples: 3\n"
        "output_file: null\n"
        "lm_eval_tasks: []  # lm-eval's image tasks need the network (hub datasets): not here\n"
        "adapter_dir: null\n"
        "quantized_checkpoint: null\n"
        "device: cpu  # cpu, cuda, mps or auto\n"
        "dtype: fp32\n"
        + _model(folder, repo, 2048)
        + "  output_dir: output/eval  # unused: eval writes no checkpoint\n"
    )


def vlm_inference_configs(configs: Path) -> dict[Path, str]:
    """The image-text generate and eval configs, by file."""
    out = {configs / f"{name}.yaml": generation(name, *rest) for name, *rest in GENERATION}
    out[configs / "smolvlm" / "256M_eval.yaml"] = smolvlm_eval()
    return out
