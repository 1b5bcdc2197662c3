"""The namespace's list of facts that belong to no instance (B6: `GET {N}/signals`): parked,
expired unrouted and refused facts sent by their business key, newest first.

`ix_signals_unrouted (namespace_id, instance_id, status, id)`: a page of one status is a range
of this index read backwards from the cursor (`instance_id IS NULL` is an equality on it), so its
cost is the page's size however many facts the namespace or the instances hold. Instance-addressed
signals (namespace_id NULL) sit together at one end of it and are never read by the list.
Re-runnable: the index is added only when missing.
"""

from weave.migration_steps import add_indexes

__depends__ = {"0017.routing"}

steps = [
    add_indexes(
        "signals",
        [
            (
                "ix_signals_unrouted",
                "KEY ix_signals_unrouted (namespace_id, instance_id, status, id) "
                "COMMENT 'the namespace-level facts, by status, newest first (B6)'",
            )
        ],
    )
]
