"""Finding a workflow by its business key (issue 34, item 2; docs/decisions.md, "Search by
correlation key"): `GET {N}/workflows?correlation_key=K` lists the instances with a wait or a
signal of exactly that key, any generation.

- `ix_inbound_deliveries_signal (signal_id)`: a workflow's page links each signal that came as an
  inbound webhook to its source's deliveries (issue 34, item 3).
- `ix_waits_correlation (correlation(32))` and `ix_signals_correlation (correlation(32))`: the
  first 32 bytes of the key. A business key is short (an order id, a payment id), so the prefix
  holds it whole almost always; a longer key is compared in full on the rows the prefix finds. A
  prefix keeps the entries narrow: the signals' index is written by every accepted signal.

Re-runnable: indexes are added only when missing; the rollback drops them.
"""

from weave.migration_steps import change_indexes

__depends__ = {"0022.retention"}

steps = [
    change_indexes(
        {
            "waits": [
                (
                    "ix_waits_correlation",
                    "KEY ix_waits_correlation (correlation(32)) COMMENT 'instances by a key their waits resolved'",
                )
            ],
            "signals": [
                (
                    "ix_signals_correlation",
                    "KEY ix_signals_correlation (correlation(32)) COMMENT 'instances by a key their signals carried'",
                )
            ],
            "inbound_deliveries": [
                (
                    "ix_inbound_deliveries_signal",
                    "KEY ix_inbound_deliveries_signal (signal_id) COMMENT 'the delivery a signal came in (console)'",
                )
            ],
        },
        {},
    )
]
