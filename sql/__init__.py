"""Hand-written SQL, one module per aggregate.

Every public function decorated with `@unit_of_work` is one transaction: callers pass a
`weave.db.Database`, the decorator opens a READ COMMITTED transaction, commits, and re-runs the
whole function on retryable errors. Helpers without the decorator take an open `Tx` and never
commit. Row locks are always taken in one global order:

    queues (sorted by name) -> instance -> activation -> wait -> signals -> tasks

Statements are module-level constants; parameters are always bound, never formatted in.
"""
