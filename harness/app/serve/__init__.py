"""``python -m harness serve``: the live workbench (a FastAPI app over a workspace folder; see api.py)."""

from harness.app.serve.api import create_app

__all__ = ["create_app"]
