"""The workbench's HTTP API (FastAPI) and its page; ``create_app(workspace)`` builds both.

Endpoints (all JSON unless said; bad requests get a 4xx whose ``detail`` is one line):

- ``POST /api/uploads`` (multipart ``file``: a CSV) -> ``{id, name, columns, rows}``; ``GET /api/data?path=|id=``
  -> columns, first rows, an even sample of rows (the page's table and plots)
- ``POST /api/runs`` (:class:`RunRequest`) -> ``{id}``; ``GET /api/runs``; ``GET /api/runs/{id}`` -> status
  (queued|running|paused|waiting|done|failed|stopped) and, when done, the result
- ``GET /api/runs/{id}/events``: server-sent events, ``node`` (one per line of nodes.jsonl, as it is written)
  and ``status`` (on every change; the last one when the run ends)
- ``POST /api/runs/{id}/messages`` ``{text}``, ``POST /api/runs/{id}/pause|resume|stop``
- ``GET /api/runs/{id}/files/{name}``: a file of the run folder (plots, view.html, result.json, nodes.jsonl)
- ``GET /api/runs/{id}/tree``: the search tree as the static viewer draws it (HTML fragment)
- ``GET /api/options``: suites' tasks, harness files in the workspace, the operator's model names, the limits

With a token (required off 127.0.0.1), every request carries it: ``Authorization: Bearer <token>``, a
``token`` query parameter (the page and EventSource use that) or the ``harness_token`` cookie. What a request may
choose and what only the operator sets (``settings``: harness/app/serve/config.py): docs/workbench.md.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

from fastapi import FastAPI, File, HTTPException, Request, UploadFile
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, StreamingResponse

from harness.app.serve.config import ServeSettings
from harness.app.serve.models import MessageRequest, RunCreated, RunInfo, RunRequest, UploadInfo
from harness.app.serve.runs import RunManager
from harness.app.serve.workspace import MAX_UPLOAD_BYTES, Workspace, WorkspaceError, preview

PAGE = Path(__file__).resolve().parent / "static" / "index.html"
SUITE_TASKS = {"synthetic": {"n_per_domain": 1}}
POLL_S = 0.25


def create_app(workspace: str | Path | Workspace, *, max_runs: int = 1, token: str | None = None,
               make_client: Any = None, settings: ServeSettings | None = None) -> FastAPI:
    """The app over ``workspace``; ``settings``: the operator's models and limits (default: the embedded models,
    default limits); ``make_client(LLMConfig)`` replaces the model factory (tests)."""
    ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
    manager = RunManager(ws, max_runs=max_runs, make_client=make_client, settings=settings)
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await asyncio.to_thread(manager.shutdown)

    app = FastAPI(title="harness-sr workbench", version="1", lifespan=lifespan)
    app.state.manager = manager
    app.state.workspace = ws

    @app.middleware("http")
    async def check_token(request: Request, call_next: Any) -> Any:
        if token:
            given = (request.headers.get("authorization", "").removeprefix("Bearer ").strip()
                     or request.query_params.get("token") or request.cookies.get("harness_token") or "")
            if not hmac.compare_digest(given.encode(), token.encode()):
                return JSONResponse({"detail": "missing or wrong token"}, status_code=401)
        return await call_next(request)

    @app.exception_handler(WorkspaceError)
    async def workspace_error(_: Request, exc: WorkspaceError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_detail(exc.errors())}, status_code=422)

    # -- page -----------------------------------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    # -- data -----------------------------------------------------------------------------------------------
    @app.post("/api/uploads", response_model=UploadInfo)
    async def upload(file: UploadFile = File(...)) -> dict[str, Any]:
        content = await file.read(MAX_UPLOAD_BYTES + 1)
        return ws.save_upload(file.filename or "data.csv", content)

    @app.get("/api/data")
    def data(path: str | None = None, id: str | None = None) -> dict[str, Any]:
        if (path is None) == (id is None):
            raise WorkspaceError("give exactly one of path and id")
        return preview(ws.data_file(id or path or ""))

    @app.get("/api/options")
    def options() -> dict[str, Any]:
        served = manager.settings
        return {"suites": _suite_tasks(), "harnesses": ["default", *ws.harness_files()], "llms": served.names(),
                "default_llm": served.default_model, "limits": served.limits.model_dump(), "workspace": str(ws.root)}

    # -- runs -----------------------------------------------------------------------------------------------
    @app.post("/api/runs", response_model=RunCreated, status_code=201)
    def start(req: RunRequest, request: Request) -> dict[str, str]:
        return {"id": manager.submit(req, client=request.client.host if request.client else "").id}

    @app.get("/api/runs", response_model=list[RunInfo])
    def runs() -> list[dict[str, Any]]:
        return manager.list()

    @app.get("/api/runs/{run_id}", response_model=RunInfo)
    def run(run_id: str) -> dict[str, Any]:
        return manager.info(run_id)

    @app.post("/api/runs/{run_id}/messages")
    def message(run_id: str, body: MessageRequest) -> dict[str, str]:
        return {"status": manager.control(run_id, "message", body.text)}

    @app.post("/api/runs/{run_id}/{action}")
    def control(run_id: str, action: str) -> dict[str, str]:
        if action not in ("pause", "resume", "stop"):
            raise HTTPException(404, f"unknown action {action!r}: pause, resume or stop")
        return {"status": manager.control(run_id, action)}

    @app.get("/api/runs/{run_id}/files/{name}")
    def run_file(run_id: str, name: str) -> FileResponse:
        folder = ws.run_dir(run_id)
        path = ws.resolve(str(Path("runs") / run_id / name))
        if path.parent != folder or not path.is_file():
            raise WorkspaceError(f"no such file in run {run_id}: {name!r}", status=404)
        return FileResponse(path)

    @app.get("/api/runs/{run_id}/tree", response_class=HTMLResponse)
    def tree(run_id: str) -> HTMLResponse:
        from harness.app.view import tree_html

        folder = ws.run_dir(run_id)
        if not folder.is_dir():
            raise WorkspaceError(f"no such run: {run_id!r}", status=404)
        return HTMLResponse(tree_html(folder))

    @app.get("/api/runs/{run_id}/events")
    async def events(run_id: str, request: Request) -> StreamingResponse:
        folder = ws.run_dir(run_id)
        if not folder.is_dir():
            raise WorkspaceError(f"no such run: {run_id!r}", status=404)
        return StreamingResponse(_stream(manager, run_id, folder, request), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return app


def validation_detail(errors: Any) -> str:
    """One line naming each offending field (``llm.base_url: ...``), never its value (it may be a secret)."""
    parts = []
    for e in errors:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body")
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(msg if loc and msg.startswith(loc) else f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)[:500] or "invalid request"


async def _stream(manager: RunManager, run_id: str, folder: Path, request: Request) -> AsyncIterator[str]:
    """Tail nodes.jsonl: one ``node`` event per complete line, a ``status`` event on each change; ends with the
    run (after the last node) or when the client goes away."""
    offset, last_status = 0, None
    nodes = folder / "nodes.jsonl"
    while True:
        final = manager.final(run_id)  # read before the file: nodes written before the end are all sent
        if nodes.is_file():
            with nodes.open("rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]
            offset += len(complete)
            for line in complete.splitlines():
                if line.strip():
                    yield f"event: node\ndata: {line.decode('utf-8', 'replace')}\n\n"
        info = manager.info(run_id, with_result=False)
        if info["status"] != last_status or final:
            last_status = info["status"]
            if final:
                info = manager.info(run_id)
            yield f"event: status\ndata: {json.dumps(jsonable_encoder(info))}\n\n"
        if final or await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)


_SUITES: dict[str, list[str]] = {}


def _suite_tasks() -> dict[str, list[str]]:
    """Task names of the built-in generated suites (computed once)."""
    if not _SUITES:
        import benchmarks

        for name, options in SUITE_TASKS.items():
            try:
                _SUITES[name] = [t.name for t in benchmarks.load_suite(name, **options)]
            except Exception:  # a suite that cannot be built is left out of the list
                _SUITES[name] = []
    return _SUITES
