"""las: Listen, Attend and Spell speech recognition — train, decode, evaluate.

from las import Recognizer
text = Recognizer.load("runs/an4/best.pt").transcribe("hello.flac").text
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["Recognizer", "__version__"]

if TYPE_CHECKING:
    from las.recognition.recognizer import Recognizer


def __getattr__(name: str) -> object:
    """`las.Recognizer` imported on first use: the CLI starts without loading torch for --help."""
    if name == "Recognizer":
        from las.recognition.recognizer import Recognizer

        return Recognizer
    raise AttributeError(f"module 'las' has no attribute {name!r}")
