"""Liveness and readiness."""

from __future__ import annotations

import falcon

from weave import migrate
from weave.db import DatabaseError, Unavailable
from weave.errors import Code, WeaveError
from weave.http import Resource, operation, send_json


class Health:
    @operation("Liveness: the process answers", public=True, response="health")
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        send_json(resp, 200, {"status": "ok"})


class Ready(Resource):
    """Ready when the database answers and no migration is pending (M4)."""

    _migrated = False  # once every migration is applied, only new code can add one

    @operation(
        "Readiness: database reachable and migrations applied", public=True, response="health", statuses=(200, 503)
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            self.database.ping()
            if not self._migrated:
                waiting = migrate.pending(self.database.url)
                if waiting:
                    raise WeaveError(
                        Code.UNAVAILABLE, f"migrations pending: {', '.join(waiting)}", headers={"Retry-After": "5"}
                    )
                self._migrated = True
        except Unavailable as exc:  # unreachable, or busy: the same words as the API's 503
            raise WeaveError(Code.UNAVAILABLE, f"{exc.what}: {exc}", headers={"Retry-After": "5"}) from None
        except DatabaseError as exc:  # it answered, with an error that retrying will not fix
            raise WeaveError(Code.UNAVAILABLE, f"the database failed: {exc}", headers={"Retry-After": "5"}) from None
        except migrate.MigrationsMissing as exc:
            raise WeaveError(Code.UNAVAILABLE, str(exc), headers={"Retry-After": "5"}) from None
        send_json(resp, 200, {"status": "ready"})
