"""Thin Falcon resources: parse, validate, call `sql/` (one unit, or a loop of one unit for a
long-poll claim; a signal takes its quota first), shape the response.

What a responder needs to be allowed (scopes, the not-found code for another namespace, a queue
grant named in the URL) is declared in its `@operation` and checked by `weave.http.Authenticate`
before it runs. Queue grants that depend on stored rows (a signal's instance, a task's queue) are
checked by the `sql/` unit that reads those rows.
"""
