"""How a step runs, never what it computes: the memory and speed switches of the feature map.

Activation checkpointing and offloading, torch.compile of layers and loss, FSDP2 sharding (and the
all-reduce the step normalises by), AdamW with bf16 states, the optimizer stepped inside backward.
The lowest sub-layer of ``ftune.training``: these modules import no other part of it. Recipes read
the names from ``ftune.training``.
"""
