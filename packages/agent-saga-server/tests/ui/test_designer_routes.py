"""The Designer's server side over HTTP (no browser): its endpoints are authenticated and CSRF
checked like the other dashboard actions, bounded, and answer a refused diagram with a 4xx and
one line, never a 500; the vendored bpmn-js is the one ``VENDORED.md`` names, and the page gets
agent_saga_bpmn's moddle descriptor."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from agent_saga import AgentKit
from agent_saga_bpmn import NAMESPACE
from agent_saga_server.dashboard.designer import BPMN_JS_VERSION, MAX_DIAGRAM
from browser_kit import Dashboard

STATIC = Path(__file__).resolve().parents[2] / "src/agent_saga_server/dashboard/static"
EXAMPLES = Path(__file__).resolve().parents[3] / "agent-saga-bpmn/examples"
ENTITY = (
    '<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    '<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL">&x;</definitions>'
)


@pytest.fixture
def session(dashboard: Dashboard) -> Iterator[tuple[httpx.Client, str]]:
    """A logged-in client and its session's CSRF token (read from the designer page)."""
    with httpx.Client(base_url=dashboard.url, trust_env=False, timeout=30) as client:
        assert client.get(dashboard.login_link("dee", "admin")).status_code in (200, 303)
        page = client.get("/ui/designer")
        assert page.status_code == 200
        found = re.search(r'data-csrf="([^"]+)"', page.text)
        assert found is not None
        yield client, found.group(1)


def post(client: httpx.Client, path: str, csrf: str, body: bytes | str) -> httpx.Response:
    return client.post(
        path, content=body, headers={"x-csrf-token": csrf, "content-type": "application/xml"}
    )


def test_the_endpoints_need_a_session_and_its_csrf_token(
    dashboard: Dashboard, session: tuple[httpx.Client, str]
) -> None:
    client, csrf = session
    flow = (EXAMPLES / "trip.bpmn").read_bytes()
    with httpx.Client(base_url=dashboard.url, trust_env=False, timeout=30) as stranger:
        assert post(stranger, "/ui/designer/validate", csrf, flow).status_code == 401
        assert stranger.get("/ui/designer").status_code == 303  # to the login page
    assert post(client, "/ui/designer/validate", "wrong", flow).status_code == 403
    assert post(client, "/ui/designer/codegen", "", flow).status_code == 403
    foreign = client.post(
        "/ui/designer/validate",
        content=flow,
        headers={"x-csrf-token": csrf, "origin": "http://evil.example"},
    )
    assert foreign.status_code == 403
    answer = post(client, "/ui/designer/validate?check_tools=no", csrf, flow)
    assert answer.status_code == 200, answer.text
    assert answer.json()["problems"] == []
    assert "script-src 'self';" in answer.headers["content-security-policy"]
    source = post(client, "/ui/designer/codegen?module=trip", csrf, flow)
    assert source.status_code == 200
    assert source.headers["content-disposition"] == 'attachment; filename="trip.py"'
    assert "@saga_scope" in source.text
    compile(source.text, "trip.py", "exec")


def book(flight: str) -> str:
    return flight


def test_tool_names_are_checked_against_the_tools_the_fleet_recorded(
    dashboard: Dashboard, session: tuple[httpx.Client, str]
) -> None:
    client, csrf = session
    kit = AgentKit(home=dashboard.home)
    try:
        booked = kit.tool(name="flights.book", compensate=book)(book)
        with kit.transaction("designer-known-tools"):
            booked(flight="LH 400")
    finally:
        kit.close()
    flow = (EXAMPLES / "trip.bpmn").read_bytes()
    deadline = time.monotonic() + 15
    while True:  # the ui ships the home's log in the background
        answer = post(client, "/ui/designer/validate", csrf, flow).json()
        unknown = {p["element_id"] for p in answer["problems"] if "unknown tool" in p["message"]}
        if answer["known_tools"] and "BookFlight" not in unknown:
            break
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)
    assert "BookHotel" in unknown  # hotels.book: no agent ran it


def test_a_refused_diagram_is_a_4xx_with_one_line_never_a_500(
    session: tuple[httpx.Client, str],
) -> None:
    client, csrf = session
    refusals = {
        "not xml": b"<<<",
        "an entity": ENTITY.encode(),
        "no process": b'<definitions xmlns="http://www.omg.org/spec/BPMN/20100524/MODEL"/>',
        "empty": b"  ",
        "bad utf-8": b"<definitions>\xff\xfe</definitions>",
    }
    for name, body in refusals.items():
        for path in ("/ui/designer/validate", "/ui/designer/codegen"):
            answer = post(client, path, csrf, body)
            assert answer.status_code == 400, (name, path, answer.text)
            detail = answer.json()["detail"]
            assert "\n" not in detail
            assert detail
            assert "default-src 'none'" in answer.headers["content-security-policy"]
    big = b"<definitions>" + b" " * MAX_DIAGRAM + b"</definitions>"
    assert post(client, "/ui/designer/validate", csrf, big).status_code == 413
    flow = (EXAMPLES / "trip.bpmn").read_bytes()
    bad_module = post(client, "/ui/designer/codegen?module=os.system", csrf, flow)
    assert bad_module.status_code == 400


def test_a_saga_diagram_that_does_not_exist_is_a_404(session: tuple[httpx.Client, str]) -> None:
    client, _ = session
    assert client.get("/ui/sagas/local/no-such-saga/diagram.bpmn").status_code == 404
    assert client.get("/ui/designer?origin=local&saga=").status_code == 404
    assert client.get("/ui/designer?origin=no%20such&saga=x").status_code == 404


def test_the_page_gets_agent_saga_bpmn_moddle_descriptor(
    session: tuple[httpx.Client, str],
) -> None:
    client, _ = session
    answer = client.get("/ui/designer/saga-moddle.json")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    descriptor = answer.json()
    assert (descriptor["uri"], descriptor["prefix"]) == (NAMESPACE, "saga")
    types = {t["name"]: [p["name"] for p in t["properties"]] for t in descriptor["types"]}
    assert types["Tool"] == ["name", "semantics", "compensator", "redact"]
    assert types["Step"] == ["ordinal", "outcome", "compensation"]


def test_the_vendored_bpmn_js_is_the_one_its_readme_names() -> None:
    folder = STATIC / "bpmn_js"
    readme = (folder / "VENDORED.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| `[^`]+`[^|]*\| `([0-9a-f]{64})` \|$", readme, re.M)
    assert len(rows) == 10
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert sorted(name for name, _ in rows) == [f for f in files if f != "VENDORED.md"]
    for name, digest in rows:
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    bundle = (folder / "bpmn-modeler.production.min.js").read_text()
    assert bundle.startswith(f"/*! bpmn-js - bpmn-modeler v{BPMN_JS_VERSION} ")
    assert f"`bpmn-js` {BPMN_JS_VERSION}" in readme
    assert "watermark" in (folder / "LICENSE").read_text()


def _chunked(csrf: str, cookie: str, host: str, chunks: list[bytes]) -> bytes:
    """A raw HTTP/1.1 POST to validate with a chunked body (no Content-Length)."""
    head = (
        f"POST /ui/designer/validate?check_tools=no HTTP/1.1\r\nHost: {host}\r\n"
        f"Cookie: asg_ui={cookie}\r\nX-CSRF-Token: {csrf}\r\n"
        "Content-Type: application/xml\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    ).encode()
    body = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    return head + body


def _exchange(dashboard: Dashboard, request: bytes) -> bytes:
    """Send ``request`` from a thread while this one reads the answer as it comes (the server
    may answer a refused body and close before reading all of it)."""
    address = urlsplit(dashboard.url)
    answer = b""
    with socket.create_connection((address.hostname, address.port), timeout=20) as sock:

        def send() -> None:
            with contextlib.suppress(OSError):
                sock.sendall(request)

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                answer += chunk
        sender.join(20)
    return answer


def test_a_chunked_body_is_bounded_and_host_and_origin_tricks_are_refused(
    dashboard: Dashboard, session: tuple[httpx.Client, str]
) -> None:
    client, csrf = session
    cookie = client.cookies["asg_ui"]
    host = urlsplit(dashboard.url).netloc
    flow = (EXAMPLES / "trip.bpmn").read_bytes()
    small = _exchange(dashboard, _chunked(csrf, cookie, host, [flow[:100], flow[100:]]))
    assert small.startswith(b"HTTP/1.1 200 "), small[:200]
    assert b'"problems":[]' in small
    big = [b" " * 65536] * (MAX_DIAGRAM // 65536 + 2)
    refused = _exchange(dashboard, _chunked(csrf, cookie, host, [b"<definitions>", *big]))
    assert refused.startswith(b"HTTP/1.1 413 "), refused[:200]
    gzipped = client.post(
        "/ui/designer/validate",
        content=gzip.compress(flow),
        headers={"x-csrf-token": csrf, "content-encoding": "gzip"},
    )
    assert gzipped.status_code == 400  # never inflated: read as the XML it is not
    assert "\n" not in gzipped.json()["detail"]
    port = urlsplit(dashboard.url).port
    assert port is not None
    tricks = {
        "foreign host": ({"host": "evil.example"}, 421),
        "trailing dot": ({"host": f"127.0.0.1.:{port}"}, 421),
        "userinfo": ({"host": f"127.0.0.1@evil.example:{port}"}, 421),
        "null origin": ({"origin": "null"}, 403),
        "other port": ({"origin": f"http://127.0.0.1:{port + 1}"}, 403),
        "suffix origin": ({"origin": f"http://127.0.0.1:{port}.evil.example"}, 403),
    }
    for name, (headers, status) in tricks.items():
        answer = client.post(
            "/ui/designer/validate",
            content=flow,
            headers={"x-csrf-token": csrf, "content-type": "application/xml", **headers},
        )
        assert answer.status_code == status, (name, answer.text)
    assert client.get("/ui/designer/validate").status_code == 405
