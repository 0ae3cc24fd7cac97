"""Dataset components: each takes the tokenizer positionally and the rest as keywords from YAML."""

from ftune.datasets.chat import chat_dataset
from ftune.datasets.concat import ConcatDataset, concat_datasets
from ftune.datasets.demo import (
    demo_dataset,
    demo_preference_dataset,
    exact_match,
    read_demo_examples,
    write_demo_data,
    write_demo_preference_data,
)
from ftune.datasets.game_tasks import textarena_dataset
from ftune.datasets.image_preference import ImagePreferenceDataset, image_preference_dataset
from ftune.datasets.image_prompts import ImagePromptDataset, image_prompt_dataset
from ftune.datasets.image_task import (
    image_task_dataset,
    image_task_preference_dataset,
    image_task_prompt_dataset,
    write_image_task,
)
from ftune.datasets.instruct import alpaca_dataset, instruct_dataset
from ftune.datasets.kto import KTODataset, kto_dataset
from ftune.datasets.multimodal import MultimodalSFTDataset, multimodal_chat_dataset
from ftune.datasets.preference import PreferenceDataset, preference_dataset
from ftune.datasets.prompts import PromptDataset, demo_prompt_dataset, prompt_dataset, write_demo_prompts
from ftune.datasets.reasoning_tasks import reasoning_gym_dataset, reasoning_gym_records
from ftune.datasets.sft import SFTDataset
from ftune.datasets.source import HubUnreachableError, load_source
from ftune.datasets.text_completion import TextCompletionDataset, text_completion_dataset
from ftune.datasets.the_cauldron import the_cauldron_dataset

__all__ = [
    "ConcatDataset",
    "HubUnreachableError",
    "ImagePreferenceDataset",
    "ImagePromptDataset",
    "KTODataset",
    "MultimodalSFTDataset",
    "PreferenceDataset",
    "PromptDataset",
    "SFTDataset",
    "TextCompletionDataset",
    "alpaca_dataset",
    "chat_dataset",
    "concat_datasets",
    "demo_dataset",
    "demo_preference_dataset",
    "demo_prompt_dataset",
    "exact_match",
    "image_preference_dataset",
    "image_prompt_dataset",
    "image_task_dataset",
    "image_task_preference_dataset",
    "image_task_prompt_dataset",
    "instruct_dataset",
    "kto_dataset",
    "load_source",
    "multimodal_chat_dataset",
    "the_cauldron_dataset",
    "preference_dataset",
    "prompt_dataset",
    "read_demo_examples",
    "reasoning_gym_dataset",
    "reasoning_gym_records",
    "text_completion_dataset",
    "textarena_dataset",
    "write_demo_data",
    "write_image_task",
    "write_demo_preference_data",
    "write_demo_prompts",
]
