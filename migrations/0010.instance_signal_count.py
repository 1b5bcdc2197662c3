"""`instances.signals_stored`: how many signals the instance holds, kept by acceptance (S1.6).

Acceptance refuses a signal once its instance holds SIGNALS_PER_INSTANCE of them. It counted the
instance's signal rows under the instance lock, which costs more the fuller the instance is (up to
1,024 index entries for every signal near the cap); the stored count costs the same at any fill.
Acceptance adds one in the same transaction that inserts the signal, under the instance lock;
nothing deletes signals.

An instant ADD COLUMN, then a fill from the rows: an assignment, so running it again after a crash
gives the same counts. Weave processes of an earlier version must not accept signals between the
fill and their restart (stop them for `weave migrate`, as for every migration).
"""

from weave.migration_steps import add_columns, data

__depends__ = {"0009.instance_version"}

INSTANCE_COLUMNS = [
    (
        "signals_stored",
        "INT UNSIGNED NOT NULL DEFAULT 0 COMMENT 'signals stored for the instance, every status (S1.6 limit); "
        "kept by acceptance'",
    ),
]
FILL_SIGNAL_COUNTS = """
UPDATE instances i SET signals_stored = (SELECT COUNT(*) FROM signals s WHERE s.instance_id = i.id)
"""

steps = [add_columns("instances", INSTANCE_COLUMNS), data(FILL_SIGNAL_COUNTS)]
