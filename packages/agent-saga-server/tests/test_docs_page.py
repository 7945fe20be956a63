"""The docs page of a real server process: Swagger UI from the server itself, no CDN, and a
Content-Security-Policy that allows this server only (the inline script by its hash)."""

from __future__ import annotations

import base64
import hashlib
import re

from plane_testkit import RunningServer

ASSET_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


def test_the_docs_page_loads_everything_from_the_server(hostile: RunningServer) -> None:
    with hostile.client() as client:
        page = client.get("/docs")
        links = re.findall(r'(?:src|href)="([^"]*)"', page.text)
        assets = {link: client.get(link) for link in links}
        spec = re.search(r"url: '([^']*)'", page.text)
        assert spec is not None
        document = client.get(spec.group(1))
        redoc = client.get("/redoc")
    assert page.status_code == 200
    assert "SwaggerUIBundle" in page.text
    assert sorted(links) == [
        "/docs-assets/favicon-32x32.png",
        "/docs-assets/swagger-ui-bundle.js",
        "/docs-assets/swagger-ui.css",
    ]
    assert not re.search(r"https?://|//cdn|jsdelivr|unpkg", page.text)
    for link, answer in assets.items():
        assert answer.status_code == 200, link
        kind = ASSET_TYPES[link[link.rindex(".") :]]
        assert kind in answer.headers["content-type"], link
        assert len(answer.content) > 500, link
    assert document.json()["info"]["title"] == "agent-saga control plane"
    assert redoc.status_code == 404  # ReDoc would load from a CDN: not served


def test_the_docs_page_policy_allows_only_this_server_and_its_own_inline_script(
    hostile: RunningServer,
) -> None:
    with hostile.client() as client:
        page = client.get("/docs")
        api = client.get("/v1/health")
    policy = dict(
        part.strip().split(" ", 1) for part in page.headers["content-security-policy"].split(";")
    )
    inline = re.findall(r"<script>(.*?)</script>", page.text, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(inline[0].encode()).digest()).decode()
    assert len(inline) == 1
    assert policy["script-src"] == f"'self' 'sha256-{digest}'"
    assert policy["default-src"] == "'none'"
    assert policy["style-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"
    assert not any("http" in value or "unsafe" in value for value in policy.values())
    assert api.headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert page.headers["x-frame-options"] == "DENY"
