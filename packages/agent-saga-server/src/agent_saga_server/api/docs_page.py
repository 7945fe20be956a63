"""The API's docs page (``/docs``): Swagger UI served by the server itself, nothing from a CDN.

The page is FastAPI's Swagger UI page pointing at the files vendored in ``swagger_ui/`` (see
its README for the version and where they come from), served under :data:`ASSETS`. Its
Content-Security-Policy allows scripts, styles, images and requests from this server only,
plus the page's one inline script by its SHA-256 hash (no ``'unsafe-inline'``).
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

VERSION = "5.35.0"
"""The vendored ``swagger-ui-dist``."""
ASSETS = "/docs-assets"
FILES = Path(__file__).with_name("swagger_ui")
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def docs_csp(page: str) -> str:
    """The page's Content-Security-Policy: this server only, and its inline scripts by hash."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"
        for script in _INLINE_SCRIPT.findall(page)
    )
    return (
        f"default-src 'none'; script-src 'self' {hashes}; style-src 'self'; "
        "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    )


def add_docs_page(app: FastAPI, *, path: str = "/docs") -> None:
    """Serve the docs page at ``path`` and its files under :data:`ASSETS` (the app must be
    made with ``docs_url=None``, ``redoc_url=None``)."""
    body = get_swagger_ui_html(
        openapi_url=app.openapi_url or "/openapi.json",
        title=f"{app.title} - API docs",
        swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
    ).body
    page = bytes(body).decode()
    headers = {"content-security-policy": docs_csp(page)}
    app.mount(ASSETS, StaticFiles(directory=FILES), name="docs-assets")

    @app.get(path, include_in_schema=False)
    def docs() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)


__all__ = ["ASSETS", "VERSION", "add_docs_page", "docs_csp"]
