"""How a setting is declared, checked and read: the ranges and choices fields declare beside their
defaults, the sections that check them when made, and the parsing of TOML files and `--set`
assignments. The settings themselves, las's decisions, are in las.core.config."""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from las.core.errors import LasError


@dataclass(frozen=True)
class Range:
    """The numbers a field accepts: from `minimum` (excluded when `open_minimum`) to `maximum`."""

    minimum: float | None = None
    maximum: float | None = None
    open_minimum: bool = False

    def check(self, value: float, key: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            raise LasError(f"config key {key!r}: expected a finite number, got {value}")
        low = self.minimum is None or value > self.minimum or (value == self.minimum and not self.open_minimum)
        high = self.maximum is None or value <= self.maximum
        if not (low and high):
            raise LasError(f"config key {key!r}: expected {self}, got {value}")

    def __str__(self) -> str:
        parts = []
        if self.minimum is not None:
            parts.append(f"{'>' if self.open_minimum else '>='} {self.minimum:g}")
        if self.maximum is not None:
            parts.append(f"<= {self.maximum:g}")
        return "a number " + " and ".join(parts)


@dataclass(frozen=True)
class NonEmpty:
    """A text field that must name something (an empty path would mean the current directory)."""

    def check(self, value: str, key: str) -> None:
        if not value.strip():
            raise LasError(f"config key {key!r}: must not be empty")


Count = Annotated[int, Range(1)]  # sizes and counts of at least one
NonNegative = Annotated[int, Range(0)]
Positive = Annotated[float, Range(0, open_minimum=True)]
Fraction = Annotated[float, Range(0, 1)]  # weights and rates in [0, 1]
PathText = Annotated[str, NonEmpty()]


class Section:
    """A config section: its fields are checked against their declared choices and ranges on creation."""

    name: ClassVar[str]

    def __post_init__(self) -> None:
        for item in dataclasses.fields(self):  # type: ignore[arg-type]
            check_value(getattr(self, item.name), field_hints(type(self))[item.name], f"{self.name}.{item.name}")


def field_hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind, include_extras=True)


def is_union(kind: Any) -> bool:
    return typing.get_origin(kind) in (typing.Union, types.UnionType)


def named_values(kind: Any) -> tuple[Any, ...]:
    """The values a field names: a Literal's, or the Literal's of a union such as
    `float | Literal["auto"]` (a number, or a value worked out from the other settings)."""
    if typing.get_origin(kind) is Literal:
        return typing.get_args(kind)
    members = typing.get_args(kind) if is_union(kind) else ()
    return tuple(
        value for member in members if typing.get_origin(member) is Literal for value in typing.get_args(member)
    )


def check_value(value: Any, hint: Any, key: str) -> None:
    """Refuse a value outside the field's choices or range (types are settled by `_coerce`)."""
    rules = hint.__metadata__ if typing.get_origin(hint) is Annotated else ()
    kind = typing.get_args(hint)[0] if rules else hint
    named = named_values(kind)
    if isinstance(value, str) and value in named:
        return  # a number's "auto" is resolved where it is read
    if typing.get_origin(kind) is Literal or named and (isinstance(value, bool) or not isinstance(value, (int, float))):
        choices = ", ".join(map(str, named)) + (", or a number" if is_union(kind) else "")
        raise LasError(f"config key {key!r}: {value!r} is not one of {choices}")
    for rule in rules:
        if isinstance(rule, (Range, NonEmpty)):
            rule.check(value, key)


@dataclass(frozen=True)
class Flag:
    """A field that `las decode` also takes as a command-line option (`--set` takes them all)."""

    option: str  # e.g. "--beam-size"
    help: str


class RetiredSetting(LasError):
    """A setting las no longer has, at a value other than the one it had by default."""


@dataclass(frozen=True)
class Retired:
    """A setting taken out: the value it had by default, and why it went."""

    default: Any
    why: str

    def holds(self, value: Any) -> bool:
        """Whether `value` (from TOML, --set or a checkpoint) is the default it had."""
        if isinstance(self.default, bool):
            return str(value).lower() in (("true", "1", "yes") if self.default else ("false", "0", "no"))
        if isinstance(self.default, (int, float)):
            try:
                return not isinstance(value, bool) and float(value) == self.default
            except (TypeError, ValueError):
                return False
        return str(value) == self.default

    def check(self, key: str, value: Any) -> None:
        """Refuse `value` of the retired `key` unless it is the default it had."""
        if not self.holds(value):
            raise RetiredSetting(
                f"config key {key!r} is no longer a setting of las ({self.why}); only its default "
                f"{self.default!r} is accepted, got {value!r}"
            )


def assignment_table(assignments: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """`section.field=value` strings as the nested table a TOML file gives, values unparsed."""
    values: dict[str, Any] = {}
    for assignment in assignments:
        key, separator, text = assignment.partition("=")
        if not separator:
            raise LasError(f"--set {assignment!r}: expected KEY=VALUE, e.g. model.attention=dot")
        *sections, name = key.strip().split(".")
        target = values
        for section in sections:  # train.augment.noise -> {"train": {"augment": {"noise": ...}}}
            target = target.setdefault(section, {})
            if not isinstance(target, dict):
                raise LasError(f"--set {assignment!r}: {key.strip()} is set twice, as a field and a section")
        target[name] = text.strip()
    return values


def read_table(path: str | Path) -> dict[str, Any]:
    """A TOML settings file as its nested table, or one clear error."""
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        raise LasError(f"config file not found: {path}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise LasError(f"{path}: invalid TOML: {error}") from None
    except OSError as error:
        raise LasError(f"cannot read config file {path}: {error.strerror or error}") from None


def coerce(value: Any, kind: Any, key: str) -> Any:
    """Parse a `--set` string (or check a TOML value) against the field's declared type."""
    if typing.get_origin(kind) is Literal:  # a choice, checked by its section
        return str(value)
    if is_union(kind):  # a number or a named value: float | Literal["auto"]
        if str(value) in named_values(kind):
            return str(value)
        number = next(member for member in typing.get_args(kind) if typing.get_origin(member) is not Literal)
        if not isinstance(value, bool) and isinstance(value, (str, int, float)):
            try:
                return number(value)
            except ValueError:
                pass
        names = " or ".join(map(repr, named_values(kind)))
        raise LasError(f"config key {key!r}: expected a number or {names}, got {value!r}")
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "1", "yes"):
                return True
            if str(value).lower() in ("false", "0", "no"):
                return False
            raise ValueError
        if kind in (int, float) and isinstance(value, bool) or kind is int and isinstance(value, float):
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise LasError(f"config key {key!r}: expected {kind.__name__}, got {value!r}") from None


def flat_settings(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"train": {"augment": {"noise": 0.4}}}` -> `{"train.augment.noise": 0.4}`: a config as
    `--set` keys name its settings."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
