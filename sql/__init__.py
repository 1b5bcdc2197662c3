"""Hand-written SQL (installed as `weave.sql`): table modules, and the engine on top of them.

Table modules read, lock, insert and change their own rows (and may use the append-only
`events` and `audit`, or a lower table module); they never import the engine, and nothing here
imports in a circle (tests/unit/test_architecture.py walks the imports):

    tenancy      namespaces, applications, queues, credentials; authentication
    definitions  publish and read definitions
    instances    start, read, lock and move an instance
    activations  a step's activations
    waits        what a SIGNAL step waits for
    signals      accept, read and list signals (S1.x); their consumer-side transitions; expiry (S2.7)
    tasks        Pulse: create, claim, heartbeat, complete, lease expiry, cancellation (P1-P6)
    inbox        final task outcomes waiting for the workflow side
    checkpoints  due looks at an instance (ROOT) or a wait (WAIT); a wait's deadline near (NEAR)
    notifications  subscriptions, the outbox a change writes (N2), deliveries and their attempts
    events       an instance's history;  audit  who did what
    backoff      failed tries of a scanner source (K2)
    engine/      everything that advances a workflow: process a checkpoint, consume an inbox
                 event, control, review (`units`); advance, activate, consume a wait's signal
                 (`moves`); one module per step kind (`task`, `signal`, `poll`)

The signal path: an API request is accepted by `signals.send_signal`; the scanner consumes it
through `engine.process_checkpoint` -> `engine.consume_wait`.

Every public function decorated with `@unit_of_work` is one transaction: callers pass a
`weave.db.Database`, the decorator opens a READ COMMITTED transaction, commits, and re-runs the
whole function on retryable errors (and on the duplicate keys it declares in `replay_on`).
Helpers without the decorator take an open `Tx` and never commit. Row locks are always taken in
one global order:

    queues (sorted by name) -> instance -> activation -> wait -> signals -> tasks

Every state change is a guarded UPDATE run by `Tx.transition`, which fails the unit unless it
changed exactly one row. Statements are module-level constants; parameters are always bound,
never formatted in.
"""
