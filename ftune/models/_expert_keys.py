"""Per-expert HF weights <-> ftune's stacked expert tensors, for the mixture-of-experts families.

The hub's files hold one key per expert and projection (`...experts.<e>.<name>.weight`); ftune holds
each layer's experts stacked (`layers.<L>.mlp.experts.gate_up_proj` (E, 2I, H), gate rows then up
rows, and `down_proj` (E, H, I)). A family gives its layout: where its experts live and what its
gate, up and down projections are called.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import torch

from ftune.models._key_rename import StateDict

_FTUNE_EXPERTS = re.compile(r"^layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$")


@dataclass(frozen=True)
class ExpertLayout:
    """Where a family's per-expert HF weights live.

    Attributes:
        family: the family's name, for messages.
        hf_prefix: the keys' start before the expert index, with `{layer}` (e.g.
            "model.layers.{layer}.mlp.experts.").
        names: the HF names of the gate, up and down projections (("gate_proj", "up_proj",
            "down_proj"); Mixtral's ("w1", "w3", "w2")).
    """

    family: str
    hf_prefix: str
    names: tuple[str, str, str]

    def split_hf(self, sd: StateDict) -> tuple[dict[str, dict[tuple[int, str], torch.Tensor]], StateDict]:
        """HF weights -> (per-expert weights by layer, keyed (expert, HF name); every other key)."""
        prefix = re.escape(self.hf_prefix.format(layer="LAYER")).replace("LAYER", r"(\d+)")
        pattern = re.compile(rf"^{prefix}(\d+)\.({'|'.join(map(re.escape, self.names))})\.weight$")
        experts: dict[str, dict[tuple[int, str], torch.Tensor]] = defaultdict(dict)
        rest: StateDict = {}
        for key, value in sd.items():
            if match := pattern.match(key):
                experts[match.group(1)][(int(match.group(2)), match.group(3))] = value
            else:
                rest[key] = value
        return experts, rest

    def add_stacked(
        self, out: StateDict, experts: dict[str, dict[tuple[int, str], torch.Tensor]]
    ) -> StateDict:
        """``out`` (the other weights, converted) with every layer's experts stacked into it.

        Raises:
            KeyError: a layer given both per-expert and fused (already in ``out``) expert weights, or
                lacking some expert's projection (:meth:`stack_layer`).
        """
        for layer, parts in experts.items():
            stacked = self.stack_layer(layer, parts)
            if twice := [k for k in stacked if k in out]:
                raise KeyError(
                    f"{self.family}: layer {layer} has both per-expert weights ({self.hf_prefix.format(layer=layer)}"
                    f"<e>.*) and fused ones ({twice[0]}); a checkpoint holds one layout. Remove one of them."
                )
            out.update(stacked)
        return out

    def split_ftune(self, sd: StateDict) -> tuple[StateDict, StateDict]:
        """ftune weights -> (every other key; the stacked experts as HF per-expert weights, views)."""
        rest: StateDict = {}
        out: StateDict = {}
        for key, value in sd.items():
            if match := _FTUNE_EXPERTS.match(key):
                out.update(self.unstack(*match.groups(), value))
            else:
                rest[key] = value
        return rest, out

    def hf_key(self, layer: str, expert: int, name: str) -> str:
        return f"{self.hf_prefix.format(layer=layer)}{expert}.{name}.weight"

    def stack_layer(self, layer: str, parts: dict[tuple[int, str], torch.Tensor]) -> StateDict:
        """One layer's per-expert weights, keyed (expert, HF name), -> its stacked ftune tensors.

        Raises:
            KeyError: an expert lacks one of its three projections (a shard missing from the folder).
        """
        num_experts = 1 + max(e for e, _ in parts)
        if missing := [
            self.hf_key(layer, e, name)
            for e in range(num_experts)
            for name in self.names
            if (e, name) not in parts
        ]:
            raise KeyError(
                f"{self.family}: layer {layer} has experts up to {num_experts - 1} but lacks {missing[:3]} "
                f"({len(missing)} missing): a checkpoint holds every expert's {', '.join(self.names)}. Check "
                "that all the checkpoint's shards are in the folder."
            )
        gate, up, down = (torch.stack([parts[(e, n)] for e in range(num_experts)]) for n in self.names)
        prefix = f"layers.{layer}.mlp.experts."
        return {prefix + "gate_up_proj": torch.cat([gate, up], dim=1), prefix + "down_proj": down}

    def unstack(self, layer: str, name: str, value: torch.Tensor) -> StateDict:
        """A stacked ftune tensor (`gate_up_proj` or `down_proj`) -> the HF per-expert weights, as views."""
        gate, up, down = self.names
        if name == "down_proj":
            return {self.hf_key(layer, e, down): w for e, w in enumerate(value.unbind(0))}
        hidden = value.shape[1] // 2
        out: StateDict = {}
        for e, w in enumerate(value.unbind(0)):  # w (2I, H): gate rows, then up rows
            out[self.hf_key(layer, e, gate)] = w[:hidden]
            out[self.hf_key(layer, e, up)] = w[hidden:]
        return out
