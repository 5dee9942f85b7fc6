"""las: Listen, Attend and Spell speech recognition — train, decode, evaluate."""

__version__ = "0.1.0"
