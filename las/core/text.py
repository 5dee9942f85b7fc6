"""Character vocabulary: special symbols, encoding and decoding of transcripts."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from las.core.errors import LasError

PAD, SOS, EOS, UNK = "<pad>", "<sos>", "<eos>", "<unk>"
SPECIALS = (PAD, SOS, EOS, UNK)
PAD_INDEX = 0  # padding, and the CTC blank
SOS_INDEX = SPECIALS.index(SOS)


# Invisible characters that text pasted from documents and web pages carries: a zero-width space, a
# byte-order mark, a soft hyphen, a word joiner. Joiners that spell (ZWJ, ZWNJ in Persian) stay.
INVISIBLE = dict.fromkeys(map(ord, "\u200b\ufeff\u00ad\u2060"))


def clean_transcript(text: str) -> str:
    """`text` as one spelling of what was said: composed characters (NFC: "é" is one character,
    however it was typed), invisible characters out, and every run of whitespace (tabs, newlines,
    no-break spaces) one space, none at the ends. Transcripts and references are read through
    it, so that a model never learns two symbols for one sound, nor is scored on invisible ones."""
    if not text.isascii():
        text = unicodedata.normalize("NFC", text).translate(INVISIBLE)
    return " ".join(text.split())


def characters_of(texts: Iterable[str]) -> set[str]:
    """Every character of `texts`, in one set as they stream by (not a set per text first: at a
    million utterances those alone were half a gigabyte)."""
    characters: set[str] = set()
    for text in texts:
        characters.update(text)
    return characters


@dataclass(frozen=True)
class Vocabulary:
    """Index 0 is padding; it doubles as the CTC blank since neither is ever a target."""

    symbols: tuple[str, ...]

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> Vocabulary:
        return cls(SPECIALS + tuple(sorted(characters_of(texts))))

    def extended(self, texts: Iterable[str]) -> Vocabulary:
        """These symbols in their order, then the characters of `texts` they lack (fine-tuning:
        a trained model keeps every character it can spell, and learns the new ones)."""
        known = set(self.symbols)
        return Vocabulary(self.symbols + tuple(sorted(characters_of(texts) - known)))

    @property
    def pad(self) -> int:
        return PAD_INDEX

    @property
    def sos(self) -> int:
        return SOS_INDEX

    @property
    def eos(self) -> int:
        return 2

    @property
    def unk(self) -> int:
        return 3

    def __len__(self) -> int:
        return len(self.symbols)

    @cached_property
    def index(self) -> dict[str, int]:
        return {symbol: position for position, symbol in enumerate(self.symbols)}

    @property
    def word_separator(self) -> str:
        """What joins two transcripts into one: a space, where the vocabulary spells one."""
        return " " if " " in self.index else ""

    def unknown_characters(self, text: str) -> set[str]:
        known = self.index
        return {character for character in text if character not in known}

    def encode(self, text: str) -> list[int]:
        """Character ids of `text`; characters outside the vocabulary are an error."""
        known = self.index
        try:
            return [known[character] for character in text]
        except KeyError as error:
            raise LasError(f"character {error.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, stopping at the first end-of-sentence and skipping other specials."""
        characters = []
        for index in ids:
            if index == self.eos:
                break
            if index >= len(SPECIALS):
                characters.append(self.symbols[index])
        return "".join(characters)

    def to_list(self) -> list[str]:
        return list(self.symbols)

    @classmethod
    def from_list(cls, symbols: list[str]) -> Vocabulary:
        if not isinstance(symbols, list) or tuple(symbols[: len(SPECIALS)]) != SPECIALS:
            raise LasError("vocabulary does not start with the special symbols")
        characters = symbols[len(SPECIALS) :]
        if not characters or len(set(characters)) != len(characters):
            raise LasError("vocabulary has no characters, or some twice")
        if not all(isinstance(character, str) and len(character) == 1 for character in characters):
            raise LasError("vocabulary holds something other than single characters")
        return cls(tuple(symbols))
