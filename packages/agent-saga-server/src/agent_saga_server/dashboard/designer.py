"""The Designer tab: a BPMN 2.0 modeler (bpmn-js, vendored under ``static/bpmn_js``) where a
risk team draws an agent's compensation flow, validates it and exports it as BPMN or as Python;
and a recorded saga drawn as a diagram (the timeline page's "Diagram" button).

The browser edits the diagram (``static/designer.js``); the server only reads what it is sent,
through :mod:`agent_saga_bpmn`'s hardened parser:

* ``POST /ui/designer/validate`` and ``POST /ui/designer/codegen`` take the diagram's XML as the
  body (at most :data:`MAX_DIAGRAM` bytes: a longer body is a 413 before it is parsed), from the
  dashboard's own origin with the session's CSRF token in an ``X-CSRF-Token`` header, like the
  passkey routes. A diagram the parser refuses is a 400 whose ``detail`` is the parser's one-line
  message; nothing a visitor sends is a 500.
* ``GET /ui/sagas/{origin}/{saga}/diagram.bpmn`` draws a saga's stored records (read as the
  timeline page reads them: the saga's records and the ``saga.settled`` records naming it).

Tool names are checked against the tools the fleet has recorded (``known_tools``), unless the
page's box is unticked (``check_tools=no``, for a flow whose tools no agent has run yet); while
the fleet has recorded none, no name is called unknown (the page says which).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib.resources import files
from typing import Annotated, Any, Literal
from urllib.parse import quote

from agent_saga import Kind
from agent_saga_bpmn import BpmnError, codegen, parse_flow, saga_to_bpmn, validate
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from ..store.db import Database
from ..store.ingest import read_records
from ..store.tokens import NAME
from .passkey_routes import ScriptViewer
from .sagas import Origin, SagaName
from .web import PREFIX, Config, PageViewer, page_headers, render

pages = APIRouter()
BPMN_JS_VERSION = "18.31.1"
"""The vendored bpmn-js (``static/bpmn_js/VENDORED.md``)."""
MAX_DIAGRAM = 2_000_000
"""The largest diagram (bytes of XML) the validate and codegen routes read."""
MAX_KNOWN_TOOLS = 10_000
"""At most this many recorded tool names are used as the known tools."""
_MODULE = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
_MODDLE = files("agent_saga_bpmn") / "moddle.json"


def known_tools(db: Database) -> frozenset[str]:
    """The tool names the fleet's stored sagas used (at most :data:`MAX_KNOWN_TOOLS`): read
    from ``known_tools``, one row a name kept by ingest, never from the sagas themselves."""
    with db.transaction(write=False) as tx:
        rows = tx.all("SELECT tool FROM known_tools ORDER BY tool LIMIT ?", (MAX_KNOWN_TOOLS,))
    return frozenset(str(row[0]) for row in rows)


def saga_records(db: Database, origin: str, saga: str) -> list[dict[str, Any]]:
    """A saga's stored records as JSON objects in seq order, with the origin's
    ``saga.settled`` records that name it (empty when the server holds none of the saga)."""
    with db.transaction(write=False) as tx:
        records = read_records(tx, origin, saga=saga)
        if not records:
            return []
        settled = [
            r for r in read_records(tx, origin, kind=Kind.SETTLED) if r.data.get("saga") == saga
        ]
    return [r.to_json() for r in sorted([*records, *settled], key=lambda r: r.seq)]


async def diagram_body(request: Request) -> bytes:
    """The request's body, refused (413) past :data:`MAX_DIAGRAM` bytes before it is all read,
    and (400) when empty."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_DIAGRAM:
        raise HTTPException(413, f"the diagram is over {MAX_DIAGRAM} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_DIAGRAM:
            raise HTTPException(413, f"the diagram is over {MAX_DIAGRAM} bytes")
    if not body.strip():
        raise HTTPException(400, "the body is empty: send the diagram's BPMN XML")
    return bytes(body)


def _problems(xml: bytes, tools: frozenset[str]) -> list[dict[str, str]]:
    flow = parse_flow(xml)
    found = validate(flow, tools or None)
    return [{"element_id": p.element_id, "message": p.message} for p in found]


def _source(xml: bytes, module: str) -> str:
    return codegen(parse_flow(xml), module)


def _refused(exc: Exception) -> HTTPException:
    line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return HTTPException(400, f"the diagram is refused: {line}")


@pages.get("/designer")
def designer_page(
    viewer: PageViewer,
    config: Config,
    origin: Annotated[str, Query(max_length=128)] = "",
    saga: Annotated[str, Query(max_length=500)] = "",
) -> Response:
    """The modeler, empty; with ``origin`` and ``saga``, showing that recorded saga."""
    load = ""
    if origin or saga:
        if not NAME.fullmatch(origin) or not saga:
            return render("missing.html", viewer, 404, what=f"saga {saga} from {origin}")
        load = f"{PREFIX}/sagas/{quote(origin, safe='')}/{quote(saga, safe='')}/diagram.bpmn"
    return render(
        "designer.html", viewer, load=load, saga=saga, origin=origin,
        known=len(known_tools(config.db)), version=BPMN_JS_VERSION,
    )  # fmt: skip


@pages.get("/designer/saga-moddle.json")
def saga_moddle(viewer: PageViewer) -> Response:
    """agent_saga_bpmn's moddle descriptor of the ``saga`` namespace (its one copy), through
    which bpmn-js keeps ``saga:tool`` and ``saga:step`` on import and export."""
    body = _MODDLE.read_bytes()
    return Response(body, media_type="application/json", headers=page_headers())


@pages.post("/designer/validate")
async def designer_validate(
    request: Request,
    viewer: ScriptViewer,
    config: Config,
    check_tools: Annotated[Literal["yes", "no"], Query()] = "yes",
) -> Response:
    """The diagram's problems (``element_id``, ``message``), as JSON; 400 on a refused one.
    With ``check_tools=no``, tool names are not checked against the fleet's recorded tools."""
    xml = await diagram_body(request)
    tools = frozenset[str]()
    if check_tools == "yes":
        tools = await run_in_threadpool(known_tools, config.db)
    try:
        found = await run_in_threadpool(_problems, xml, tools)
    except (BpmnError, ValueError) as exc:
        raise _refused(exc) from None
    answer = {"problems": found, "known_tools": len(tools)}
    return JSONResponse(answer, headers=page_headers())


@pages.post("/designer/codegen")
async def designer_codegen(
    request: Request,
    viewer: ScriptViewer,
    module: Annotated[str, Query(max_length=64)] = "flow",
) -> Response:
    """The diagram as a Python module (a download named ``MODULE.py``); 400 on a refused one."""
    if not _MODULE.fullmatch(module):
        raise HTTPException(400, "module must be a lower-case Python name (a-z, 0-9, _)")
    xml = await diagram_body(request)
    try:
        source = await run_in_threadpool(_source, xml, module)
    except (BpmnError, ValueError) as exc:
        raise _refused(exc) from None
    disposition = f'attachment; filename="{module}.py"'
    headers = {**page_headers(), "content-disposition": disposition}
    return Response(source, media_type="text/x-python; charset=utf-8", headers=headers)


@pages.get("/sagas/{origin}/{saga}/diagram.bpmn")
def saga_diagram(viewer: PageViewer, config: Config, origin: Origin, saga: SagaName) -> Response:
    """The recorded saga as BPMN 2.0 XML with its layout, or a 404 page."""
    records: Sequence[dict[str, Any]] = saga_records(config.db, origin, saga)
    if not records:
        return render("missing.html", viewer, 404, what=f"saga {saga} from {origin}")
    name = re.sub(r"[^A-Za-z0-9._-]", "_", saga)[:80]
    headers = {**page_headers(), "content-disposition": f'inline; filename="{name}.bpmn"'}
    return Response(saga_to_bpmn(records), media_type="application/xml", headers=headers)


__all__ = [
    "BPMN_JS_VERSION",
    "MAX_DIAGRAM",
    "diagram_body",
    "known_tools",
    "pages",
    "saga_records",
]
