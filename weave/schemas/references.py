"""References resolved once per validator, not once per value they are followed for (issue 26, item 2).

jsonschema asks `referencing` to resolve a `$ref` (or `$dynamicRef`) every time it follows one, and
`referencing` walks the pointer from the document's root each time, in time quadratic in its
segments (at every segment it looks again at all the segments before it for a new base URI). A
2.6 KB schema with `$defs` nested 90 deep and `items` referring to the innermost one made every
item of a payload cost a walk of 180 segments: 24 KB of payload cost 6.4 s before the work budget
(charged one unit per `$ref`) refused it. Publishing now bounds the nesting and the pointer's
length (`weave.schemas.publish`), and a validator keeps what it resolved: each reference is walked
once, in each scope it is followed in, for the validator's life.

A resolution depends on the reference, the base URI it is resolved against (a subschema's `$id`
moves it) and, for `$dynamicRef`, the dynamic scope (the base URIs passed through on the way);
those three are the key, so the answers are the ones `referencing` gives. `ResolvedOnce` wraps
`referencing`'s `Resolver` (which may not be subclassed) in the two methods jsonschema calls, and
reads the two fields of the key that it keeps private; `check()` (run at import, and by the tests)
refuses a `referencing` that no longer has them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import attrs
import referencing._core

from weave.schemas import budget

# A validator keeps at most this many resolutions (a schema's references times the scopes they
# are followed in: a few dozen in real schemas); past it, references are resolved as they come.
MAX_RESOLUTIONS_KEPT = 4096


def check() -> None:
    fields = {field.name for field in attrs.fields(referencing._core.Resolver)}
    if not {"_base_uri", "_previous"} <= fields:
        raise RuntimeError(
            "referencing's Resolver no longer keeps _base_uri and _previous; review weave/schemas/references.py"
        )


check()


class Resolution(NamedTuple):
    """What jsonschema reads of a resolution: the schema found, and the resolver to go on with."""

    contents: Any
    resolver: ResolvedOnce


class ResolvedOnce:
    """A `referencing` resolver whose lookups are kept, with every resolver it leads to.

    `charged`: units of the work budget each resolution not yet kept costs (about 20 µs for the
    meta-schema's). Only a resolver made for one check may charge them: one kept across checks
    would charge the first check and not the next, and a check's charge must not depend on what
    came before it (`budget`)."""

    __slots__ = ("_resolver", "_known", "_charged")

    def __init__(self, resolver, known: dict | None = None, charged: int = 0) -> None:
        self._resolver = resolver
        self._known: dict[tuple, Resolution] = {} if known is None else known
        self._charged = charged

    def lookup(self, ref: str) -> Resolution:
        key = (ref, self._resolver._base_uri, self._resolver._previous)
        found = self._known.get(key)
        if found is None:
            budget.spend(self._charged)
            resolved = self._resolver.lookup(ref)
            found = Resolution(resolved.contents, ResolvedOnce(resolved.resolver, self._known, self._charged))
            if len(self._known) < MAX_RESOLUTIONS_KEPT:
                self._known[key] = found
        return found

    def in_subresource(self, subresource) -> ResolvedOnce:
        inner = self._resolver.in_subresource(subresource)
        return self if inner is self._resolver else ResolvedOnce(inner, self._known, self._charged)

    def __len__(self) -> int:
        """Resolutions kept."""
        return len(self._known)
