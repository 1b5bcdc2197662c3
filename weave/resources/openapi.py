"""GET /v1/openapi.json."""

from __future__ import annotations

import falcon

from weave.http import operation, send_json


class OpenApiDocument:
    document: dict = {}  # filled by create_app once every route is known, this one included

    @operation("This API's OpenAPI 3.1 description", public=True, response="openapi_document")
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        send_json(resp, 200, self.document)
