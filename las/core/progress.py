"""Progress bars: one policy for every long step."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TypeVar

from tqdm import tqdm

Item = TypeVar("Item")


def progress_bar(items: Iterable[Item], description: str, unit: str, enabled: bool = True) -> tqdm:
    """A transient tqdm bar on stderr; off when stderr is not a terminal (logs, pipes, tests), so
    that what remains there is the run's own lines and errors, and off when not `enabled`."""
    return tqdm(items, desc=description, unit=unit, leave=False, disable=None if enabled else True)


def warn(message: str) -> None:
    """A warning line on stderr that does not break a progress bar."""
    say(f"warning: {message}")


def say(message: str) -> None:
    """A plain line on stderr that does not break a progress bar."""
    tqdm.write(message, file=sys.stderr)
