"""The services' web pages: plain HTML, CSS and a little JavaScript served by the API itself.

Each page is a static file returned with a Content-Security-Policy that lets it load and call
nothing but its own origin (no CDN, no font service, no analytics): the browser enforces what
the tests check. Pages use the same public API routes as any client.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

# styles: displaCy's SVG carries style attributes; scripts: our files only
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def shared_static() -> Path:
    """The folder of the files both services serve (``ui.css``)."""
    return Path(str(files("synattn_shared") / "static"))


def install_page(app: FastAPI, static: Path, page: str) -> None:
    """Serve ``static/page`` at ``/`` and the folder at ``/ui`` (shared files at
    ``/ui/shared``), outside the OpenAPI schema."""
    index = static / page

    async def root() -> FileResponse:
        return FileResponse(index, media_type="text/html; charset=utf-8", headers=HEADERS)

    app.add_api_route("/", root, include_in_schema=False, methods=["GET"])
    app.mount("/ui/shared", StaticFiles(directory=shared_static()), name="ui-shared")
    app.mount("/ui", StaticFiles(directory=static), name="ui")
