"""One turn of a conversation: the unit every dataset transform produces and every tokenizer consumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["system", "user", "assistant", "tool", "ipython"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool", "ipython")


@dataclass
class Message:
    """A message in a conversation.

    Args:
        role: who speaks: one of "system", "user", "assistant", "tool", "ipython".
        content: the text of the message.
        masked: when True, the message's tokens get the ignore label (-100): the model reads
            them but is not trained to produce them (prompt tokens when `train_on_input=False`).
        eot: whether the message ends its turn (adds the end-of-turn token where the format has one).
    """

    role: str
    content: str
    masked: bool = False
    eot: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.content, str):
            raise ValueError(
                f"Message content must be a string, got {type(self.content).__name__} "
                f"({' '.join(repr(self.content).split())[:60]}) for a {self.role!r} message."
            )
        if self.role not in ROLES:
            raise ValueError(
                f"Message role {self.role!r} is not supported; accepted roles are {', '.join(ROLES)}."
            )
