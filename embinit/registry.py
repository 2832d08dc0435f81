"""Named entries of one kind (initializers, position encodings, missing-row fills) that the built-ins and the
user's extension files (embinit.extensions) add to, with each entry's public metadata."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, TypeVar

Entry = TypeVar("Entry")  # a function (initializer, missing-row fill) or a class (position encoding)


@dataclass(frozen=True)
class AtLeast:
    """A parameter's smallest allowed value, as `Annotated[int, AtLeast(1)]` (checked by embinit.config.check)."""

    value: float


class Snapshot(NamedTuple):
    """A registry's entries and metadata at one moment, for `Registry.restore`."""

    entries: dict
    metadata: dict


class Registry(dict):
    """name -> entry, filled by the `register` decorator; `defaults` are the metadata keys an entry may set."""

    def __init__(self, kind: str, **defaults: Any):
        super().__init__()
        self.kind = kind  # how errors name an entry, e.g. "initializer"
        self.defaults = defaults
        self._metadata: dict[str, dict[str, Any]] = {}

    def register(self, name: str, **metadata: Any) -> Callable[[Entry], Entry]:
        """Decorator adding the function or class as `name`, with `metadata` over the registry's defaults."""
        unknown = metadata.keys() - self.defaults.keys()
        if unknown:
            raise TypeError(f"{self.kind} {name!r}: unknown metadata {', '.join(sorted(unknown))}")

        def add(entry: Entry) -> Entry:
            self[name] = entry
            self._metadata[name] = {**self.defaults, **metadata}
            return entry

        return add

    def lookup(self, name: str) -> Entry:
        """The entry `name`, or a ValueError naming the kind and the allowed names."""
        if name not in self:
            raise ValueError(f"unknown {self.kind} {name!r}; allowed: {', '.join(self)}")
        return self[name]

    def metadata(self, name: str) -> dict[str, Any]:
        """The metadata `name` was registered with, over the defaults."""
        self.lookup(name)
        return {**self.defaults, **self._metadata.get(name, {})}

    def snapshot(self) -> Snapshot:
        return Snapshot(dict(self), dict(self._metadata))

    def restore(self, snapshot: Snapshot) -> None:
        """Back to `snapshot`: entries added since are dropped, replaced ones put back."""
        self.clear()
        self.update(snapshot.entries)
        self._metadata = dict(snapshot.metadata)
