"""Bad-input cases of issue 40: images in the data (item 2), image-text checkpoints (item 1).

Run by bad_inputs.py inside its own namespace (`_c`, `CASES`, `SETUPS`, `_write`, `LORA` come from
there), so the catalogue stays one list.
"""
# ruff: noqa: F821  (names of bad_inputs.py, which runs this file in its namespace)

import json as _json

from PIL import Image as _Image

# fmt: off
_IMAGES = ('~dataset', 'dataset._component_=ftune.datasets.multimodal_chat_dataset', 'dataset.source={tmp}/images.jsonl', 'dataset.image_transform=gemma3')
CASES += [  # noqa: F821
    _c('ckpt-image-text-on-text-folder', 'checkpoints', (*LORA, 'checkpointer.image_text=true'), 'describes a text model', 'config.json', "model_type 'llama'", 'Set checkpointer.image_text=false'),  # noqa: F821
    _c('image-pair-missing-rejected', 'data', ('validate', 'smolvlm/256M_lora_dpo', '~dataset', 'dataset._component_=ftune.datasets.image_preference_dataset', 'dataset.source={tmp}/image_pairs.jsonl', 'dataset.image_transform=idefics3'), 'cannot train', 'image_pairs.jsonl:2', "the answer 'rejected' is null", 'write the answer or delete the record', 'image_pair_no_rejected'),  # noqa: F821
    _c('generate-image-missing', 'values', ('run', 'generate', 'prompt=hi', 'images=[{tmp}/gone.png]', 'checkpointer.checkpoint_dir={ckpt}'), 'does not exist', 'images[0]', "image file '{tmp}/gone.png'", 'fix the path or add the file'),  # noqa: F821
    _c('generate-image-unreadable', 'values', ('run', 'generate', 'prompt=hi', 'images=[{tmp}/bad.png]', 'checkpointer.checkpoint_dir={ckpt}'), 'cannot be decoded as an image', 'images[0]', "image file '{tmp}/bad.png'", 'store PNG, JPEG', 'image_bad_bytes'),  # noqa: F821
    _c('generate-image-text-model', 'checkpoints', ('run', 'generate', 'prompt=hi', 'images=[{tmp}/ok.png]', 'checkpointer.checkpoint_dir={ckpt}'), 'describes a text-only model', "images: images were given, but '{ckpt}/config.json'", "model_type 'llama'", 'point checkpointer.checkpoint_dir at one, or leave images empty', 'image_ok'),  # noqa: F821
    _c('image-task-other-sizes', 'data', ('validate', 'smolvlm/256M_lora_dpo', 'dataset.data_dir={tmp}/task', 'dataset.n_train=6', 'dataset.n_heldout=2', 'dataset.size=16'), 'holds files written for other arguments', "data_dir '{tmp}/task'", 'dataset.n_train=6 (recorded 4) in its image_task.json', 'Delete the folder (the task is written anew on first use) or pass the arguments it was written with', 'image_task_small'),  # noqa: F821
    _c('image-missing', 'data', (*LORA, *_IMAGES), 'cannot be read', 'images.jsonl:2: messages[0].content[0].image', "image file '{tmp}/gone.png' does not exist", 'fix the path or add the file', 'image_missing'),  # noqa: F821
]
# fmt: on


def _image_missing(tmp, ckpt):
    """A multimodal file whose second record names an image file that does not exist."""
    _Image.new("RGB", (3, 2), (200, 10, 10)).save(tmp / "ok.png")
    answer = {"role": "assistant", "content": "a disc"}
    lines = [
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image", "image": name}, {"type": "text", "text": "?"}],
                },
                answer,
            ]
        }
        for name in ("ok.png", "gone.png")
    ]
    _write(tmp / "images.jsonl", "".join(_json.dumps(line) + "\n" for line in lines))  # noqa: F821


SETUPS["image_missing"] = _image_missing  # noqa: F821


def _image_pair_no_rejected(tmp, ckpt):
    """Image-grounded preference pairs whose second record has no rejected answer."""
    _Image.new("RGB", (3, 2), (200, 10, 10)).save(tmp / "ok.png")
    prompt = [
        {"role": "user", "content": [{"type": "image", "image": "ok.png"}, {"type": "text", "text": "?"}]}
    ]
    lines = [{"messages": prompt, "chosen": "red", "rejected": "blue"}, {"messages": prompt, "chosen": "red"}]
    _write(tmp / "image_pairs.jsonl", "".join(_json.dumps(line) + "\n" for line in lines))  # noqa: F821


SETUPS["image_pair_no_rejected"] = _image_pair_no_rejected  # noqa: F821


SETUPS["image_bad_bytes"] = lambda tmp, ckpt: _write(tmp / "bad.png", "not a png")  # noqa: F821
SETUPS["image_ok"] = lambda tmp, ckpt: _Image.new("RGB", (3, 2), (200, 10, 10)).save(tmp / "ok.png")  # noqa: F821


def _image_task_small(tmp, ckpt):
    """The image task written for 4 + 2 examples of 16 pixels (its image_task.json records them)."""
    from ftune.datasets.image_task import write_image_task  # torch: only when the case runs

    write_image_task(tmp / "task", n_train=4, n_heldout=2, size=16)


SETUPS["image_task_small"] = _image_task_small  # noqa: F821
