"""Named entries of one kind (initializers, position encodings, missing-row fills, batchings) that the built-ins and
the user's extension files (embinit.workflow.extensions) add to, each through its module's own `register` decorator."""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from typing import Any, NamedTuple

from embinit.identity.sources import Source, registered


@dataclass(frozen=True)
class AtLeast:
    """A parameter's smallest allowed value, as `Annotated[int, AtLeast(1)]` (checked by embinit.workflow.checks.check)."""

    value: float


@dataclass(frozen=True)
class Above:
    """A parameter's exclusive lower bound, as `Annotated[float, Above(0)]` (checked by embinit.workflow.checks.check)."""

    value: float


@dataclass(frozen=True)
class NameOf:
    """A parameter naming an entry of `what`, a config section (`sources`) or a registry's kind (`missing-row
    policy`), as `Annotated[str, NameOf("sources")]`: embinit.workflow.checks.check requires the name to exist."""

    what: str


def names_of(fn, params: dict) -> dict[str, tuple[NameOf, str]]:
    """{parameter: (its NameOf, its value)} for each parameter of `fn` annotated with a NameOf, the value as set in
    `params` or by default: the config entries and registry entries the call will refer to."""
    hints, named = typing.get_type_hints(fn, include_extras=True), {}
    for name, parameter in inspect.signature(fn).parameters.items():
        hint = hints.get(name)
        extras = typing.get_args(hint)[1:] if typing.get_origin(hint) is typing.Annotated else ()
        for mark in (x for x in extras if isinstance(x, NameOf)):
            named[name] = (mark, params.get(name, parameter.default))
    return named


class Snapshot(NamedTuple):
    """A registry's entries and flags at one moment, for `Registry.restore`."""

    entries: dict
    flags: dict


class Registry(dict):
    """name -> entry; `flags` are named sets of entry names (e.g. the initializers that ignore the pre-trained
    matrix), kept with the entries so that a snapshot restores both."""

    def __init__(self, kind: str, *flags: str):
        super().__init__()
        self.kind = kind  # how errors name an entry, e.g. "initializer"
        self.flags: dict[str, set[str]] = {flag: set() for flag in flags}

    def lookup(self, name: str) -> Any:
        """The entry `name` (a built-in's Source loaded), or a ValueError naming the kind and the allowed names."""
        if name not in self:
            raise ValueError(f"unknown {self.kind} {name!r}; allowed: {', '.join(self)}")
        entry = self[name]
        return entry.load() if isinstance(entry, Source) else entry

    def snapshot(self) -> Snapshot:
        return Snapshot(dict(self), {flag: set(names) for flag, names in self.flags.items()})

    def restore(self, snapshot: Snapshot) -> None:
        """Back to `snapshot`: entries added since are dropped, replaced ones put back; the flag sets are updated
        in place, as modules hold them."""
        self.clear()
        self.update(snapshot.entries)
        for flag, names in self.flags.items():
            names.clear()
            names.update(snapshot.flags[flag])


# The registries whose built-ins import torch: their names and code are read from the files while the workflow parses
# (a built-in is its Source until embinit.models.position or embinit.training.batching is imported and registers it)
POSITION_ENCODINGS: Registry = Registry("position encoding")
POSITION_ENCODINGS.update(registered("embinit.models.position", "register"))
BATCHINGS: Registry = Registry("batching")
BATCHINGS.update(registered("embinit.training.batching", "register_batching"))
