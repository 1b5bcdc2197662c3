"""What the console says about a code, in words: signal dispositions, review reasons, statuses.

The wording follows docs/signals.md §4 and docs/decisions.md; a code without an entry is shown
as it is (a newer server may know more codes than this table).
"""

from __future__ import annotations

# status or disposition of a signal -> (the mark's kind on the timeline, what it means)
SIGNAL_OUTCOMES = {
    "PENDING": ("pending", "Kept, waiting to be taken by its step's wait (the step may not have started yet)."),
    "CONSUMED": ("winner", "The wait took it as its winner: its payload became the step's result."),
    "CORRELATION_MISMATCH": ("mismatch", "Rejected: the step's wait expects another correlation key."),
    "LATE": ("late", "Rejected as late: accepted at or after the wait's deadline (equal is late)."),
    "WAIT_SETTLED": ("settled", "Rejected: another signal of the same activation had already won."),
    "QUERY_SETTLED": ("settled", "Rejected: the POLL step's query reported the final result first."),
    "STALE_ACTIVATION": ("stale", "Rejected: meant for an older activation (generation) of the step."),
    "STEP_SETTLED": ("settled", "Rejected: the step had already finished."),
    "INSTANCE_SETTLED": ("settled", "Rejected: the workflow had finished or was cancelled."),
    "EXPIRED_UNMATCHED": ("expired", "Expired: no wait took it before the workflow's total deadline."),
    "LEGACY_UNVERIFIED": ("stale", "Rejected: stored before signal identity existed; never used."),
}
MARK_KINDS = {
    "winner": "winner",
    "pending": "pending",
    "late": "late",
    "mismatch": "correlation mismatch",
    "stale": "stale activation",
    "settled": "already settled",
    "expired": "expired",
}

REVIEW_REASONS = {
    "WAIT_EXPIRED": "The step's wait reached its deadline without a signal that counts.",
    "STEP_DEADLINE_EXCEEDED": "The step did not finish before its deadline.",
    "DEADLINE_EXCEEDED": "The workflow passed its total deadline before its next step could start; extend the "
    "deadline to let it go on, or fail or cancel it.",
    "TASK_FAILED": "The step's task failed on its last attempt.",
    "TASK_OUTCOME_UNKNOWN": "The task's lease expired without a report: its effect is unknown.",
    "TASK_CANCELLED": "The task reported CANCELLED though nobody asked it to stop.",
    "CORRELATION_UNRESOLVED": "The correlation pointer did not resolve to a 1-512 byte string in the input.",
    "ACCEPTANCE_PROOF_MISMATCH": "The winning signal no longer matches its acceptance record: it was changed.",
    "QUERY_FAILED": "A query round failed on its last attempt.",
    "QUERY_OUTCOME_UNKNOWN": "A query round's lease expired without a report: its outcome is unknown.",
    "QUERY_CANCELLED": "A query round reported CANCELLED though nobody asked it to stop.",
    "QUERY_RESULT_INVALID": "A query round reported something that is not a valid PENDING or FINAL report.",
    "QUERY_RESULT_CONFLICT": "A query round's FINAL result differs from the final signal that was taken.",
    "QUERY_DEADLINE_EXCEEDED": "The POLL step reached its deadline without a final answer.",
}


def signal_outcome(row: dict) -> tuple[str, str]:
    """(mark kind, explanation) of a signal row: by its disposition, else its status."""
    code = row["disposition"] or row["status"]
    if code in SIGNAL_OUTCOMES:
        return SIGNAL_OUTCOMES[code]
    return ("expired" if row["status"] == "EXPIRED" else "settled", f"{row['status']} / {code}")


def review_reason(code: str | None) -> str:
    return "" if code is None else REVIEW_REASONS.get(code, code)
