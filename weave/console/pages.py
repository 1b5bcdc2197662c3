"""The review console's resources: sign-in, the workflow list, one workflow, and its actions.

Every page is server-rendered HTML (Jinja2, autoescaped: whatever a user sent is text on the page)
under a strict Content-Security-Policy that allows no script at all, so the console works without
JavaScript and a value that gets past escaping still cannot run.

- **Sessions.** A token is presented once, in the sign-in form; the browser then holds a random
  session id in an `HttpOnly`, `SameSite=Strict` cookie (`Secure` over HTTPS), and the database
  only its hash (`sql.sessions`). Every page finds the credential again through the session and
  checks it as an API request checks its token, so a revoked credential's session is refused on
  the next page. Signing in again ends the browser's earlier session; a credential holds a few
  sessions at most (`sql.sessions`); sign-in attempts are rate-limited by client address and by
  credential (`weave.console.limits`, 429 with `Retry-After`), and refused ones are audited.
- **Text** a client sent is shown with the logs' escapes (`_visible`), stored values within a
  budget (`weave.console.values`); a workflow's page holds one page of each of its lists.
- **Authorization.** Each responder declares its operation like the API's (`@page` marks an
  `Operation` with `session=True`), and the checks are the API's own: `check_path_ids`, then
  `weave.http.authorize` (namespace: not found, scope: 403, a disabled application reads only),
  then the SQL unit's grant check for the instance's queues.
- **CSRF.** Every form carries a token: derived from the session id for a session's forms (a page
  cannot be posted without having been read with the cookie), and a double-submit cookie for the
  sign-in form, which has no session yet. A POST without it is refused with 403.
- **Actions** call the same units as the API (`engine.control`, `engine.review`) with the body the
  API would have validated against the same schema; a refusal re-renders the page with the
  problem's message next to the field it names, and success answers 303 to the updated page.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import math
import re
import secrets
from dataclasses import dataclass, field
from importlib import resources
from typing import Callable
from urllib.parse import parse_qsl, quote, urlencode

import falcon
import jinja2
from markupsafe import Markup, escape

from weave import auth, jsontext, logs, schemas
from weave.console import limits, timeline, values, words
from weave.errors import Code, WeaveError
from weave.http import (
    PATH_IDS,
    Operation,
    Resource,
    authorize,
    bounded_value_text,
    check_path_ids,
    check_query_names,
    operation,
    query_int,
    query_text,
    read_body,
)
from weave.resources import inbound as inbound_resources
from weave.resources import notify as notify_resources
from weave.resources.workflows import DEFINITION_NAME, STATUSES, Search, list_or_search, search_terms
from weave.rules import review as review_rules
from weave.rules import routing as routing_rules
from weave.rules import signals as signal_rules
from weave.sql import engine, inbound, instances, notifications, sessions, tenancy
from weave.sql import signals as signal_rows
from weave.sql import timeline as records

log = logging.getLogger(__name__)

ROOT = "/console"
SESSION_COOKIE = "weave_console"
SIGN_IN_COOKIE = "weave_console_sign_in"  # the sign-in form's CSRF token, before there is a session
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)
# No script from anywhere, styles only from the stylesheet, forms only to ourselves, never framed.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",  # pages carry payloads and results
}
FORM = "application/x-www-form-urlencoded"
LIST_PAGE = 50
FORM_FIELDS_MAX = LIST_PAGE + 8  # a bulk review picks at most one page of the list, beside its own fields
# One page of each list on a workflow's page (issue 26, item 1): with values.PAGE_BYTES they bound it.
SIGNALS_PAGE = 25
ROUNDS_PAGE = 25
EVENTS_PAGE = 50
PAGED = {"signals": SIGNALS_PAGE, "rounds": ROUNDS_PAGE, "events": EVENTS_PAGE}
CURSOR_MAX = 2**64 - 1
TOKEN_MAX = 200  # longer than any token Weave makes
WATCH_SECONDS = 2
# Where sign-in may send the browser back to: a console path only, never another origin, and no
# dot segment, written (`..`) or percent-encoded (`%2e%2e`, `.%2E`: browsers resolve those too;
# Weave's own paths never encode a dot).
NEXT = re.compile(
    r"(?!.*/\.\.?(/|$))(?!.*%2[eE])/console/ns/[A-Za-z0-9_.~%!$&'()*+,;=:@-]+(/[A-Za-z0-9_.~%!$&'()*+,;=:@-]+)*"
)
DONE = {
    "pause": "Paused.",
    "resume": "Resumed.",
    "cancel": "Cancelled.",
    "retry_step": "The step was retried: a new activation started.",
    "complete_step": "The step was completed with your result.",
    "fail": "The workflow was failed.",
    "extend_deadline": "The total deadline was extended.",
}


def _visible(value):
    """What a template writes of a value, before Jinja escapes it for HTML: text with the logs'
    escapes (`weave.logs.escape`: a control, format or separator character such as NUL, ESC or a
    bidirectional override becomes `\\x00`, `\\u202e`, and a backslash `\\\\`), so that a value
    cannot hide or reorder what the page shows (issue 26, item 10). Markup (a macro's output, a
    value laid out by `weave.console.values`, which escapes in JSON's notation) is left as it is."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return logs.escape(value)
    return value


def _as_typed(value: str) -> Markup:
    """A form field's value written back into the form after a refusal: exactly what was typed (its
    own sender's text, in this very answer), HTML-escaped only, so that sending it again sends the same."""
    return escape(value)


_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("weave.console", "templates"),
    autoescape=True,  # every template is HTML
    finalize=_visible,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_templates.filters["time"] = timeline.stamp
_templates.filters["count"] = "{:,}".format
_templates.filters["as_typed"] = _as_typed
_templates.filters["segment"] = lambda value: quote(value, safe="")  # a workflow id in a path
_STYLESHEET = resources.files("weave.console").joinpath("static/console.css").read_bytes()


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode("ascii")).digest()


def _csrf_token(session_id: str) -> str:
    # Only a holder of the cookie can compute it, and it does not reveal the id or its stored hash.
    return hashlib.sha256(b"weave console csrf\0" + session_id.encode("ascii")).hexdigest()


def _cookie(req: falcon.Request, name: str) -> str | None:
    values = req.get_cookie_values(name) or []
    return values[0] if len(values) == 1 else None


def _set_cookie(req: falcon.Request, resp: falcon.Response, name: str, value: str, max_age: int) -> None:
    # A client can only add `Secure` by claiming https; behind a TLS proxy that sets the header it is right.
    resp.set_cookie(
        name,
        value,
        max_age=max_age,
        path=ROOT,
        secure=req.forwarded_scheme == "https",
        http_only=True,
        same_site="Strict",
    )


def _render(resp: falcon.Response, template: str, http_status: int = 200, **context) -> None:
    resp.status = http_status
    resp.content_type = falcon.MEDIA_HTML
    resp.text = _templates.get_template(template).render(**context)


def _problem_page(resp: falcon.Response, exc: WeaveError, visit: Visit | None = None) -> None:
    resp.set_headers(exc.headers)
    _render(resp, "error.html", exc.code.status, visit=visit, problem=exc, root=ROOT)


def _redirect(resp: falcon.Response, location: str) -> None:
    resp.status = 303
    resp.location = location
    resp.content_type = falcon.MEDIA_HTML
    resp.text = ""


def _list_url(namespace: str, listed: str = "workflows", **query) -> str:
    """A namespace's list (`workflows`, or `signals`: the facts that belong to no instance) with its query."""
    query = {k: v for k, v in query.items() if v}
    return f"{ROOT}/ns/{namespace}/{listed}" + (f"?{urlencode(query)}" if query else "")


def _deliveries_url(namespace: str, source: str, **query) -> str:
    """An inbound source's list of deliveries (W5) with its query."""
    return _list_url(namespace, f"inbound/{quote(source, safe='')}/deliveries", **query)


def _workflow_url(namespace: str, workflow_id: str, **query) -> str:
    query = {k: v for k, v in query.items() if v}
    return f"{ROOT}/ns/{namespace}/workflows/{quote(workflow_id, safe='')}" + (f"?{urlencode(query)}" if query else "")


def read_form(req: falcon.Request, limit: int) -> dict[str, str]:
    """The fields of a urlencoded form body (each at most once; 400 otherwise)."""
    raw = read_body(req, FORM, limit)
    try:
        pairs = parse_qsl(raw.decode("ascii"), keep_blank_values=True, max_num_fields=FORM_FIELDS_MAX, errors="strict")
    except (UnicodeError, ValueError):
        raise WeaveError(Code.BAD_REQUEST, "the form could not be read") from None
    fields = dict(pairs)
    if len(fields) != len(pairs):
        raise WeaveError(Code.BAD_REQUEST, "a form field was sent more than once")
    return fields


def _require_csrf(sent: str | None, expected: str | None) -> None:
    if not sent or not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise WeaveError(Code.FORBIDDEN, "the form's CSRF token is missing or wrong: reload the page and try again")


@dataclass(frozen=True)
class Visit:
    """Who is looking (a current credential, through its session) and what they sent."""

    principal: auth.Principal
    csrf: str
    form: dict[str, str] = field(default_factory=dict)


class Console(Resource):
    def signed_in(self, req: falcon.Request) -> tuple[str, auth.Principal] | None:
        """The session id and the principal of its credential as it is now, or None."""
        session_id = _cookie(req, SESSION_COOKIE)
        if session_id is None or not SESSION_ID.fullmatch(session_id):
            return None
        principal = sessions.principal(self.database, _digest(session_id))
        return None if principal is None else (session_id, principal)


def page(summary: str, *scopes: str, query: tuple[tuple[str, str], ...] = ()) -> Callable:
    """Mark a console responder with its operation and run the API's checks before it, the query's
    too (`query`: the parameters it takes): one it does not take, or one given twice, is refused
    with 422 as by the API (issue 26, item 10).

    A request without a live session is sent to sign in (303). A refusal is a page saying why,
    with the problem's status."""
    meta = Operation(summary, scopes=scopes, not_found=Code.WORKFLOW_NOT_FOUND, session=True, query=query)

    def mark(responder: Callable) -> Callable:
        @functools.wraps(responder)
        def run(self: Console, req: falcon.Request, resp: falcon.Response, **params) -> None:
            resp.set_headers(SECURITY_HEADERS)
            visit = None
            try:
                check_path_ids(params, meta.not_found)
                signed_in = self.signed_in(req)
                if signed_in is None:
                    next_page = req.relative_uri if req.method == "GET" else None
                    return _redirect(resp, ROOT + (f"?{urlencode({'next': next_page})}" if next_page else ""))
                session_id, principal = signed_in
                visit = Visit(principal, _csrf_token(session_id))
                if req.method == "POST":
                    visit = Visit(principal, visit.csrf, read_form(req, self.body_limit))
                    _require_csrf(visit.form.get("csrf"), visit.csrf)
                authorize(principal, meta, params, req.method)
                check_query_names(req, meta)
                responder(self, req, resp, visit, **params)
            except WeaveError as exc:
                _problem_page(resp, exc, visit)

        run.operation = meta
        return run

    return mark


# ---- sign-in and sign-out -------------------------------------------------------------------------


def _sign_in_form(req, resp, status: int, error: str = "", next_page: str = "", **headers) -> None:
    """The sign-in form with a fresh CSRF token, which its cookie carries as well (double submit)."""
    csrf = secrets.token_urlsafe(32)
    _set_cookie(req, resp, SIGN_IN_COOKIE, csrf, int(sessions.LIFETIME.total_seconds()))
    resp.set_headers(headers)
    _render(resp, "sign_in.html", status, visit=None, csrf=csrf, error=error, next_page=next_page, root=ROOT)


class SignInForm(Console):
    @operation("The review console's sign-in form (HTML)", public=True)
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.set_headers(SECURITY_HEADERS)
        next_page = req.get_param("next") or ""
        signed_in = self.signed_in(req)
        if signed_in is not None:
            return _redirect(resp, next_page if NEXT.fullmatch(next_page) else _list_url(signed_in[1].namespace))
        _sign_in_form(req, resp, 200, next_page=next_page)


def _too_many(wait: float, detail: str) -> WeaveError:
    seconds = max(1, math.ceil(wait))
    return WeaveError(
        Code.QUOTA_EXCEEDED, f"{detail}: try again in {seconds} s.", headers={"Retry-After": str(seconds)}
    )


class SignIn(Console):
    def __init__(self, database, body_limit: int, sign_in_limits: limits.SignInLimits):
        super().__init__(database, body_limit)
        self.limits = sign_in_limits

    @operation("Sign in to the review console with a token (HTML form)", public=True)
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.set_headers(SECURITY_HEADERS)
        address = req.remote_addr or "?"
        try:
            # Every attempt counts against its address, before anything is read (issue 26, item 10).
            wait = self.limits.address.take(address)
            if wait:
                raise _too_many(wait, "Too many sign-in attempts from this address")
            form = read_form(req, self.body_limit)
            _require_csrf(form.get("csrf"), _cookie(req, SIGN_IN_COOKIE))
        except WeaveError as exc:
            return _problem_page(resp, exc)
        token = form.get("token", "").strip()
        next_page = form.get("next", "")
        token_sha256 = auth.token_hash(token) if 0 < len(token) <= TOKEN_MAX else None
        principal = tenancy.authenticate(self.database, token_sha256) if token_sha256 else None
        if principal is None:
            self.refused(token_sha256, "the token is unknown, revoked or expired", address)
            challenge = {"WWW-Authenticate": 'Bearer realm="weave"'}
            return _sign_in_form(req, resp, 401, "The token is unknown, revoked or expired.", next_page, **challenge)
        wait = self.limits.credential.take(principal.credential_id)
        if wait:
            self.refused(token_sha256, "too many sign-ins of this credential", address)
            return _problem_page(resp, _too_many(wait, "Too many sign-ins of this credential"))
        if "workflows:read" not in principal.scopes:
            self.refused(token_sha256, "the credential lacks the scope workflows:read", address)
            return _sign_in_form(req, resp, 403, "This credential lacks the scope workflows:read.", next_page)
        session_id = secrets.token_urlsafe(32)
        earlier = _cookie(req, SESSION_COOKIE)  # this browser's session so far, if any: it ends
        replaced = _digest(earlier) if earlier is not None and SESSION_ID.fullmatch(earlier) else None
        sessions.start(self.database, principal, _digest(session_id), replaced, address)
        _set_cookie(req, resp, SESSION_COOKIE, session_id, int(sessions.LIFETIME.total_seconds()))
        resp.unset_cookie(SIGN_IN_COOKIE, path=ROOT, same_site="Strict")
        _redirect(resp, next_page if NEXT.fullmatch(next_page) else _list_url(principal.namespace))

    def refused(self, token_sha256: bytes | None, reason: str, address: str) -> None:
        """A refused sign-in: audited where its token names a credential, logged in any case (never the token)."""
        audited = token_sha256 is not None and sessions.refuse(self.database, token_sha256, reason, address)
        log.warning("console sign-in refused from %s: %s%s", address, reason, "" if audited else " (no credential)")


class SignOut(Console):
    @operation("Sign out of the review console (HTML form)", public=True)
    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.set_headers(SECURITY_HEADERS)
        session_id = _cookie(req, SESSION_COOKIE)
        if session_id is not None and SESSION_ID.fullmatch(session_id):
            try:
                _require_csrf(read_form(req, self.body_limit).get("csrf"), _csrf_token(session_id))
            except WeaveError as exc:
                return _problem_page(resp, exc)
            sessions.end(self.database, _digest(session_id))
        resp.unset_cookie(SESSION_COOKIE, path=ROOT, same_site="Strict")
        _redirect(resp, ROOT)


class Stylesheet:
    @operation("The review console's stylesheet", public=True)
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = "text/css; charset=utf-8"
        resp.data = _STYLESHEET
        resp.set_header("X-Content-Type-Options", "nosniff")
        resp.cache_control = ["max-age=300"]


# ---- pages ------------------------------------------------------------------------------------------


LIST_QUERY = (
    ("status", "one of the instance statuses"),
    ("definition", "a definition name"),
    ("correlation_key", "a business key: the workflows with a wait or a signal of exactly it"),
    ("workflow_id_prefix", "the start of a workflow id"),
    ("after", "the cursor of the previous page"),
)


def _list_cursor(req: falcon.Request) -> int | None:
    """A list's `after`: the key its previous page ended at (None: absent, or not a key)."""
    after = req.get_param("after") or ""
    return int(after) if after.isascii() and after.isdigit() and len(after) <= 20 else None


class WorkflowList(Console):
    @page("The review console's workflow list (HTML)", "workflows:read", query=LIST_QUERY)
    def on_get(self, req: falcon.Request, resp: falcon.Response, visit: Visit, namespace: str) -> None:
        principal = visit.principal
        problem = None
        try:
            status = query_text(req, "status", STATUSES.__contains__, f"one of {', '.join(STATUSES)}")
            definition = query_text(
                req, "definition", DEFINITION_NAME.fullmatch, "a definition name (1-128 of A-Za-z0-9_.-)"
            )
            search = search_terms(req)
            after = _list_cursor(req)
        except WeaveError as exc:
            problem, status, definition, search, after = exc, None, None, Search(None, None), None
        in_review, more_in_review = [], None
        try:
            if status is None and after is None and not search:  # the work first: what waits for an operator
                in_review, more_in_review = instances.list_workflows(
                    self.database, principal, "NEEDS_REVIEW", definition, None, LIST_PAGE
                )
            rows, next_after = list_or_search(self.database, principal, search, status, definition, after, LIST_PAGE)
        except WeaveError as exc:  # a search too broad: said beside the form, the list shown unsearched
            problem, search = exc, Search(None, None)
            rows, next_after = instances.list_workflows(self.database, principal, status, definition, after, LIST_PAGE)
        terms = {"correlation_key": search.correlation_key, "workflow_id_prefix": search.workflow_id_prefix}
        _render(
            resp,
            "workflows.html",
            422 if problem else 200,
            visit=visit,
            root=ROOT,
            namespace=namespace,
            problem=problem,
            statuses=STATUSES,
            status=status or "",
            definition=definition or "",
            search=search,
            in_review=in_review,
            review_queue=status is None and after is None and not search,
            more_in_review=more_in_review is not None,
            rows=rows,
            next_url=_list_url(namespace, status=status, definition=definition, **terms, after=next_after),
            has_next=next_after is not None,
            review_url=_list_url(namespace, status="NEEDS_REVIEW", definition=definition),
            # the bulk review's form, on a list of workflows in review, for a credential that may review
            bulk=status == "NEEDS_REVIEW" and "workflows:review" in principal.scopes and bool(rows),
            bulk_url=f"{ROOT}/ns/{namespace}/bulk-review",
            bulk_actions=BULK_ACTIONS,
            reason_words=words.review_reason,
            workflow_url=functools.partial(_workflow_url, namespace),
        )


FACT_QUERY = (
    ("status", f"one of {', '.join(signal_rows.UNROUTED_STATUSES)}"),
    ("after", "the cursor of the previous page"),
)


@dataclass(frozen=True)
class Filtered:
    """A newest-first list's query as a page reads it: its one filter, its cursor, and the problem
    with a filter that breaks its rule (the page then shows everything, with the problem)."""

    value: str | None
    after: int | None
    problem: WeaveError | None


def _filtered(req: falcon.Request, name: str, accepted: tuple[str, ...], rule: str) -> Filtered:
    try:
        return Filtered(query_text(req, name, accepted.__contains__, rule), _list_cursor(req), None)
    except WeaveError as exc:
        return Filtered(None, None, exc)


def _render_newest(
    resp: falcon.Response,
    template: str,
    query: Filtered,
    read: Callable[[int, int], list[dict]],
    listed: str,
    cursor: str,
    url: Callable[..., str],
    **context,
) -> None:
    """A page of a list read newest first by id, `read(before, limit)` giving the rows with ids
    below `before` (the API's cursor: the query's `after`), rendered with its rows as `listed`
    (422 with the problem when the filter was refused) and the link to the next older page,
    `url(after=…)` of its last row's `cursor`."""
    before = query.after if query.after and query.after < 2**63 else 2**63 - 1
    rows = read(before, LIST_PAGE + 1)
    rows, more = rows[:LIST_PAGE], len(rows) > LIST_PAGE
    _render(
        resp,
        template,
        422 if query.problem else 200,
        problem=query.problem,
        has_next=more,
        next_url=url(after=rows[-1][cursor] if more else None),
        **{listed: rows},
        **context,
    )


class FactList(Console):
    @page(
        "The review console's list of a namespace's facts that belong to no instance (HTML, B6)",
        "workflows:read",
        query=FACT_QUERY,
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, visit: Visit, namespace: str) -> None:
        """The facts sent by their business key that no instance holds (B6: PARKED, EXPIRED unrouted,
        REJECTED ambiguous or by a full instance), newest first, a page at a time by id, through
        the API's own read (`GET {N}/signals`)."""
        query = _filtered(req, "status", signal_rows.UNROUTED_STATUSES, FACT_QUERY[0][1])
        _render_newest(
            resp,
            "facts.html",
            query,
            lambda before, limit: [
                {**row, "route": routing_rules.where(False, row["disposition"])}
                for row in signal_rows.list_facts(
                    self.database, visit.principal, query.value, None, None, before, limit
                )
            ],
            "facts",
            "id",
            functools.partial(_list_url, namespace, "signals", status=query.value),
            visit=visit,
            root=ROOT,
            namespace=namespace,
            statuses=signal_rows.UNROUTED_STATUSES,
            status=query.value or "",
        )


class SourceList(Console):
    @page("The review console's list of a namespace's inbound webhook sources (HTML, W1)", "workflows:read")
    def on_get(self, req: falcon.Request, resp: falcon.Response, visit: Visit, namespace: str) -> None:
        """The namespace's inbound sources as the API lists them (`GET {N}/inbound`: name, scheme,
        age; never a secret), each linked to its deliveries."""
        _render(
            resp,
            "sources.html",
            visit=visit,
            root=ROOT,
            namespace=namespace,
            sources=[inbound_resources.source_view(row) for row in inbound.list_sources(self.database, namespace)],
            deliveries_url=functools.partial(_deliveries_url, namespace),
        )


DELIVERY_QUERY = (
    ("outcome", f"one of {', '.join(inbound_resources.OUTCOMES)}"),
    ("after", "the cursor of the previous page"),
)


class DeliveryList(Console):
    @page(
        "The review console's list of an inbound source's deliveries (HTML, W5)", "workflows:read", query=DELIVERY_QUERY
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, visit: Visit, namespace: str, source: str) -> None:
        """A source's recorded deliveries, newest first, a page at a time by id, through the API's
        own read (`GET {N}/inbound/{source}/deliveries`): an unknown source is 404."""
        query = _filtered(req, "outcome", inbound_resources.OUTCOMES, DELIVERY_QUERY[0][1])
        _render_newest(
            resp,
            "deliveries.html",
            query,
            lambda before, limit: inbound.list_deliveries(
                self.database, visit.principal, source, query.value, before, limit
            ),
            "deliveries",
            "delivery_id",
            functools.partial(_deliveries_url, namespace, source, outcome=query.value),
            visit=visit,
            root=ROOT,
            namespace=namespace,
            source=source,
            outcomes=inbound_resources.OUTCOMES,
            outcome=query.value or "",
        )


def _notifications_url(namespace: str, subscription: str, **query) -> str:
    """A subscription's list of notifications (N3) with its query."""
    return _list_url(namespace, f"notify/{quote(subscription, safe='')}/deliveries", **query)


class SubscriptionList(Console):
    @page("The review console's list of a namespace's notification subscriptions (HTML, N1)", "workflows:read")
    def on_get(self, req: falcon.Request, resp: falcon.Response, visit: Visit, namespace: str) -> None:
        """The namespace's subscriptions as the API lists them (`GET {N}/notify`: url, events,
        status, failing since; never a secret), a failing endpoint shown as failing, each linked
        to its notifications."""
        rows = notifications.list_subscriptions(self.database, visit.principal.namespace)
        _render(
            resp,
            "subscriptions.html",
            visit=visit,
            root=ROOT,
            namespace=namespace,
            subscriptions=[notify_resources.subscription_view(row) for row in rows],
            notifications_url=functools.partial(_notifications_url, namespace),
        )


NOTIFICATION_QUERY = (
    ("status", f"one of {', '.join(notify_resources.STATUSES)}"),
    ("after", "the cursor of the previous page"),
)


class NotificationList(Console):
    @page(
        "The review console's list of a subscription's notifications with their attempts (HTML, N3)",
        "workflows:read",
        query=NOTIFICATION_QUERY,
    )
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, visit: Visit, namespace: str, subscription: str
    ) -> None:
        """A subscription's notifications, newest first, a page at a time by id, each with its
        attempts, through the API's own read (`GET {N}/notify/{subscription}/deliveries`): an
        unknown subscription is 404."""
        query = _filtered(req, "status", notify_resources.STATUSES, NOTIFICATION_QUERY[0][1])
        _render_newest(
            resp,
            "notifications.html",
            query,
            lambda before, limit: notifications.list_deliveries(
                self.database, visit.principal.namespace, subscription, query.value, before, limit
            ),
            "deliveries",
            "notification_id",
            functools.partial(_notifications_url, namespace, subscription, status=query.value),
            visit=visit,
            root=ROOT,
            namespace=namespace,
            subscription=subscription,
            statuses=notify_resources.STATUSES,
            status=query.value or "",
            workflow_url=functools.partial(_workflow_url, namespace),
        )


@dataclass
class Refusal:
    """A refused action, shown on the page: which form, the message by field, the values sent."""

    form: str
    messages: dict[str, list[str]]
    values: dict[str, str]


PAGE_QUERY = (
    ("done", "the action just done, for its notice"),
    ("watch", "1: reload every 2 s until the workflow ends"),
    *[(f"{name}_{side}", f"the {name} page {side} this key") for name in PAGED for side in ("after", "before")],
)


class WorkflowPage(Console):
    @page("The review console's page of one workflow (HTML)", "workflows:read", query=PAGE_QUERY)
    def on_get(self, req: falcon.Request, resp: falcon.Response, visit: Visit, namespace: str, workflow_id: str):
        cursors = {
            f"{name}_{side}": query_int(req, f"{name}_{side}", 0, 0, CURSOR_MAX)
            for name in PAGED
            for side in ("after", "before")
        }
        show_workflow(
            self.database,
            resp,
            visit,
            namespace,
            workflow_id,
            done=req.get_param("done") or "",
            watch=req.get_param("watch") == "1",
            cursors=cursors,
        )


@dataclass(frozen=True)
class Value:
    """A stored value as the page shows it, and the API call that answers it exactly."""

    shown: values.Shown
    exact: str


def _pager(url: Callable, cursors: dict[str, int], name: str, part: records.Page, key: str) -> dict[str, str | None]:
    """The links to the pages before and after `part` of the list `name` (None where there is none),
    the other lists kept where they are."""
    kept = {k: v for k, v in cursors.items() if not k.startswith(f"{name}_")}
    # An empty page after a cursor (its rows went, or the cursor was typed) links back to what precedes it.
    first = part.rows[0][key] if part.rows else cursors.get(f"{name}_after", 0) + 1
    return {
        "earlier": url(**kept, **{f"{name}_before": first}) + f"#{name}" if part.earlier else None,
        "later": url(**kept, **{f"{name}_after": part.rows[-1][key]}) + f"#{name}" if part.later else None,
    }


def show_workflow(
    database,
    resp: falcon.Response,
    visit: Visit,
    namespace: str,
    workflow_id: str,
    status: int = 200,
    refusal: Refusal | None = None,
    done: str = "",
    watch: bool = False,
    cursors: dict[str, int] | None = None,
) -> None:
    cursors = {k: v for k, v in (cursors or {}).items() if v}
    windows = {
        name: records.Window(size, cursors.get(f"{name}_after", 0), cursors.get(f"{name}_before"))
        for name, size in PAGED.items()
    }
    record = records.read_record(
        database,
        visit.principal,
        workflow_id,
        windows["signals"],
        windows["rounds"],
        windows["events"],
        values.VALUE_BYTES,
        values.DATA_BYTES,
    )
    instance = record.instance
    steps = record.document["steps"]
    api = f"/v1/namespaces/{namespace}/workflows/{quote(workflow_id, safe='')}"
    budget = values.Budget(values.PAGE_BYTES)  # spent in the order the page shows the values
    workflow_input = Value(budget.show(instance["input"], instance["input_bytes"]), f"GET {api} (its /input)")
    results = {
        step["key"]: Value(
            budget.show(record.latest[step["key"]]["result"], record.latest[step["key"]]["result_bytes"]),
            f"GET {api} (its /steps/{index}/result)",
        )
        for index, step in enumerate(steps)
        if step["key"] in record.latest
    }
    signals = [
        {
            **row,
            "kind": words.signal_outcome(row)[0],
            "words": words.signal_outcome(row)[1],
            # B6: how a fact sent by its business key came here; None for one sent to this instance by its id
            "route": routing_rules.where(True, row["disposition"]) if row["by_key"] else None,
            "value": Value(
                # A signal stored before signal identity holds its text as it came: shown on one line.
                budget.show(row["payload"], row["payload_bytes"], laid_out=row["request_digest"] is not None),
                f"GET {api}/signals/{row['id']}",
            ),
        }
        for row in record.signals.rows
    ]
    rounds = []
    for row in record.rounds.rows:
        report, size = (
            (row["result"], row["result_bytes"]) if row["result"] is not None else (row["error"], row["error_bytes"])
        )
        final = row["status"] not in ("QUEUED", "RUNNING")
        exact = (
            f"GET {api}/events (the QUERY_RESULT_RECORDED event of task {row['id']})"
            if final
            else "none yet: the API serves a round's report once it is final (QUERY_RESULT_RECORDED)"
        )
        rounds.append({**row, "value": Value(budget.show(report, size), exact)})
    history = [
        {
            **row,
            "value": Value(
                budget.show(row["data"], row["data_bytes"], values.DATA_BYTES, laid_out=False),
                f"GET {api}/events?after={row['seq'] - 1}&limit=1",
            ),
        }
        for row in record.history.rows
    ]
    ended = instance["status"] in timeline.TERMINAL
    url = functools.partial(_workflow_url, namespace, workflow_id)
    _render(
        resp,
        "workflow.html",
        status,
        visit=visit,
        root=ROOT,
        namespace=namespace,
        instance=instance,
        steps=steps,
        latest=record.latest,
        results=results,
        workflow_input=workflow_input,
        # Every generation's wait, each with the correlation key it resolved at its activation.
        keys=sorted(record.waits.values(), key=lambda w: w["id"]),
        waits_by_activation=record.waits,
        tasks_by_activation=record.tasks,
        under_review=next((key for key, a in record.latest.items() if a["status"] == "NEEDS_REVIEW"), None),
        review_reason=words.review_reason(instance["review_reason"]),
        step_reason=words.review_reason,
        drawing=timeline.draw(
            steps,
            instance,
            record.activations,
            list(record.waits.values()),
            record.rounds.rows,
            record.signals.rows,
            record.now,
        ),
        mark_kinds=words.MARK_KINDS,
        signals=signals,
        signals_stored=instance["signals_stored"],
        signals_pager=_pager(url, cursors, "signals", record.signals, "id"),
        rounds=rounds,
        has_rounds=bool(rounds) or record.rounds.earlier,
        rounds_pager=_pager(url, cursors, "rounds", record.rounds, "id"),
        activation_of={a["id"]: a for a in record.activations},
        history=history,
        history_pager=_pager(url, cursors, "events", record.history, "seq"),
        page_sizes=PAGED,
        refusal=refusal,
        done=DONE.get(done, ""),
        watch=watch and not ended,
        watch_seconds=WATCH_SECONDS,
        ended=ended,
        url=url(),
        here=url(**cursors),
        watch_url=url(**cursors, watch="1"),
        can_control="workflows:control" in visit.principal.scopes,
        can_review="workflows:review" in visit.principal.scopes,
        read_only=visit.principal.application_status != "ACTIVE",
        list_url=_list_url(namespace),
        deliveries_url=functools.partial(_deliveries_url, namespace),
        notifications=record.notifications,
        notifications_shown=records.NOTIFICATIONS_SHOWN,
        notifications_url=functools.partial(_notifications_url, namespace),
    )


def _refused(exc: WeaveError, form: str, values: dict[str, str]) -> Refusal:
    """The problem's messages by the form field its pointers name ("" for the form as a whole)."""
    messages: dict[str, list[str]] = {}
    for error in exc.errors:
        pointer = error["pointer"]
        name = pointer.lstrip("/").split("/", 1)[0]
        if name in values:
            messages.setdefault(name, []).append(
                error["message"] if pointer == f"/{name}" else f"{pointer}: {error['message']}"
            )
        else:
            messages.setdefault("", []).append(f"{pointer or '/'}: {error['message']}")
    return Refusal(form, messages or {"": [exc.detail]}, values)


class WorkflowAction(Console):
    """The actions' shared answer: the unit's result is the updated page (303), a refusal the page
    with the problem next to the field (the problem's status)."""

    def act(self, resp, visit: Visit, namespace: str, workflow_id: str, action: str, run: Callable) -> None:
        # the fields people type in
        values = {name: visit.form.get(name, "") for name in ("reason", "result", "deadline_seconds")}
        try:
            run()
        except WeaveError as exc:
            if exc.code in (Code.WORKFLOW_NOT_FOUND, Code.FORBIDDEN):
                raise  # not a problem with the form: the page itself is refused
            return show_workflow(
                self.database, resp, visit, namespace, workflow_id, exc.code.status, _refused(exc, action, values)
            )
        _redirect(resp, _workflow_url(namespace, workflow_id, done=action))


class WorkflowControl(WorkflowAction):
    """Pause, resume, cancel: the API's R1 operation as a form."""

    def __init__(self, database, body_limit: int, action: str):
        super().__init__(database, body_limit)
        self.action = action

    @page("Pause, resume or cancel a workflow from the review console (HTML form)", "workflows:control")
    def on_post(self, req: falcon.Request, resp: falcon.Response, visit: Visit, namespace: str, workflow_id: str):
        def run() -> None:
            body = {"reason": visit.form.get("reason", "")}
            schemas.validate("control", body)
            engine.control(self.database, visit.principal, workflow_id, self.action, body["reason"])

        self.act(resp, visit, namespace, workflow_id, self.action, run)


class WorkflowReview(WorkflowAction):
    """retry_step, complete_step (with a JSON result), fail, extend_deadline (with a number of
    seconds): the API's R2 and R4 operation as a form."""

    @page("Review a workflow from the review console (HTML form)", "workflows:review")
    def on_post(self, req: falcon.Request, resp: falcon.Response, visit: Visit, namespace: str, workflow_id: str):
        action = visit.form.get("action", "")

        def run() -> None:
            body = {"action": action, "reason": visit.form.get("reason", "")}
            if visit.form.get("step_key"):
                body["step_key"] = visit.form["step_key"]
            if action == review_rules.COMPLETE_STEP:
                body["result"] = _json_field(visit.form.get("result", ""), "/result")
                bounded_value_text(body["result"], "/result")
            if action == review_rules.EXTEND_DEADLINE:
                body["deadline_seconds"] = _whole_number(visit.form.get("deadline_seconds", ""), "/deadline_seconds")
            schemas.validate("review", body)
            engine.review(
                self.database,
                visit.principal,
                workflow_id,
                action,
                body.get("step_key"),
                body.get("result", signal_rules.ABSENT),
                body["reason"],
                body.get("deadline_seconds"),
            )

        self.act(resp, visit, namespace, workflow_id, action, run)


# ---- bulk review (issue 34, item 4) -------------------------------------------------------------------

PICK = "pick:"  # a picked workflow's checkbox is named `pick:<workflow_id>` (a form field is sent once)
BULK_ACTIONS = (review_rules.RETRY_STEP, review_rules.FAIL, review_rules.CANCEL)


@dataclass(frozen=True)
class BulkResult:
    workflow_id: str
    done: bool
    outcome: str  # the workflow's status after the action, or the refusal's problem code
    detail: str


def _bulk_request(form: dict[str, str]) -> tuple[str, str, list[str]]:
    """The action, the reason and the picked workflow ids of a bulk form, each checked (422)."""
    action, reason = form.get("action", ""), form.get("reason", "")
    if action not in BULK_ACTIONS:
        message = f"one of {', '.join(BULK_ACTIONS)}"
        raise WeaveError(Code.VALIDATION_FAILED, f"/action: {message}", [{"pointer": "/action", "message": message}])
    schemas.validate("control", {"reason": reason})
    picked = [name.removeprefix(PICK) for name in form if name.startswith(PICK)]
    rule = PATH_IDS["workflow_id"]
    if not picked or not all(rule.rule.fullmatch(workflow_id) for workflow_id in picked):
        message = "pick at least one workflow" if not picked else f"a workflow id is {rule.description}"
        raise WeaveError(Code.VALIDATION_FAILED, f"/pick: {message}", [{"pointer": "/pick", "message": message}])
    return action, reason, picked


class BulkReview(Console):
    """retry_step, fail or cancel for the workflows in review picked on the list, with one reason:
    each workflow its own unit of work and its own audit record, as if reviewed one by one; the
    answer is a result per workflow, what was done or why it was refused (issue 34, item 4)."""

    @page("Review several workflows in review at once from the review console (HTML form)", "workflows:review")
    def on_post(self, req: falcon.Request, resp: falcon.Response, visit: Visit, namespace: str) -> None:
        action, reason, picked = _bulk_request(visit.form)
        results = [self.review_one(visit.principal, workflow_id, action, reason) for workflow_id in picked]
        _render(
            resp,
            "bulk.html",
            visit=visit,
            root=ROOT,
            namespace=namespace,
            action=action,
            reason=reason,
            results=results,
            workflow_url=functools.partial(_workflow_url, namespace),
            list_url=_list_url(namespace, status="NEEDS_REVIEW"),
        )

    def review_one(self, principal: auth.Principal, workflow_id: str, action: str, reason: str) -> BulkResult:
        try:
            step_key = None
            if action == review_rules.RETRY_STEP:  # the step under review, as the workflow's page names it
                facts = instances.read_workflow(self.database, principal, workflow_id)
                under_review = [key for key, a in facts.activations.items() if a["status"] == "NEEDS_REVIEW"]
                if not under_review:
                    return BulkResult(workflow_id, False, Code.INVALID_STATE.name, "no step is under review")
                step_key = under_review[0]
            facts = engine.review(self.database, principal, workflow_id, action, step_key, signal_rules.ABSENT, reason)
        except WeaveError as exc:
            return BulkResult(workflow_id, False, exc.code.name, exc.detail)
        return BulkResult(workflow_id, True, facts.instance["status"], DONE[action])


def _whole_number(text: str, pointer: str) -> int:
    """A form field holding a whole number (digits only); the schema then checks its range."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()):
        message = "a whole number of seconds" if text else "required"
        raise WeaveError(Code.VALIDATION_FAILED, f"{pointer}: {message}", [{"pointer": pointer, "message": message}])
    return int(text)


def _json_field(text: str, pointer: str):
    """A form field holding JSON, read exactly as an API body is (numbers kept as written)."""
    if not text.strip():
        raise WeaveError(Code.VALIDATION_FAILED, f"{pointer}: required", [{"pointer": pointer, "message": "required"}])
    try:
        return jsontext.loads(text)
    except jsontext.JsonRejected as exc:
        raise WeaveError(
            Code.VALIDATION_FAILED,
            f"{pointer}: not acceptable JSON: {exc}",
            [{"pointer": pointer, "message": f"not acceptable JSON: {exc}"}],
        ) from None


def routes(database, config) -> list[tuple[str, object]]:
    """The console's routes (`/console/…`, docs/rules.md#api); `{namespace}` is the URL's `{ns}`."""
    limit = config.max_body_bytes
    ns = f"{ROOT}/ns/{{namespace}}"
    return [
        (ROOT, SignInForm(database, limit)),
        (f"{ROOT}/sign-in", SignIn(database, limit, limits.SignInLimits())),
        (f"{ROOT}/sign-out", SignOut(database, limit)),
        (f"{ROOT}/style.css", Stylesheet()),
        (f"{ns}/workflows", WorkflowList(database, limit)),
        (f"{ns}/signals", FactList(database, limit)),  # GET {N}/signals, as a page
        (f"{ns}/bulk-review", BulkReview(database, limit)),  # not under workflows/: any name there is an id
        (f"{ns}/inbound", SourceList(database, limit)),
        (f"{ns}/inbound/{{source}}/deliveries", DeliveryList(database, limit)),  # GET {N}/inbound/…, as a page
        (f"{ns}/notify", SubscriptionList(database, limit)),
        (f"{ns}/notify/{{subscription}}/deliveries", NotificationList(database, limit)),  # GET {N}/notify/…
        (f"{ns}/workflows/{{workflow_id}}", WorkflowPage(database, limit)),
        *[
            (f"{ns}/workflows/{{workflow_id}}/{action}", WorkflowControl(database, limit, action))
            for action in ("pause", "resume", "cancel")
        ],
        (f"{ns}/workflows/{{workflow_id}}/review", WorkflowReview(database, limit)),
    ]
