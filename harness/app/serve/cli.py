"""``python -m harness serve --port N --workspace DIR [--model ...] [--config FILE] [--limit k=v]``: run the
workbench with uvicorn.

It binds 127.0.0.1 by default; any other address needs a token (``--token`` or ``HARNESS_SR_TOKEN``), because
the app starts solves and reads files of the workspace for whoever can reach it. The models a page may pick and
the limits of its requests are the operator's, set here (harness/app/serve/config.py, docs/workbench.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

TOKEN_ENV = "HARNESS_SR_TOKEN"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m harness serve",
                                     description="The live workbench: a local web app over a workspace folder.")
    parser.add_argument("--workspace", default=".", help="the folder of data, harness files and runs (default .)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (not loopback: needs a token)")
    parser.add_argument("--token", default=None, help=f"required on every request (default ${TOKEN_ENV})")
    parser.add_argument("--max-runs", type=int, default=1, help="solves at once; the rest wait (default 1)")
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="YAML with models (name -> llm group or LLMConfig fields), default_model, limits")
    parser.add_argument("--model", action="append", default=[], metavar="NAME[=GROUP][,key=value...]",
                        help="a model the page may pick (repeat; the first is the default): a built-in llm group "
                             "(local, tiny, openai, vllm) or NAME=GROUP with LLMConfig fields, e.g. "
                             "qwen=openai,model=Qwen2.5-7B,base_url=http://gpu1:8000/v1,api_key_env=VLLM_KEY "
                             "(default: local and tiny, the embedded models)")
    parser.add_argument("--limit", action="append", default=[], metavar="KEY=VALUE",
                        help="raise or lower a request limit (repeat): max_run_seconds (1800), sr_time_factor (4), "
                             "max_population (2000), max_length (50), max_tokens (4096), max_agent_steps (60), "
                             "max_runs_per_client (4)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if args.host not in LOOPBACK and not token:
        print(f"error: binding {args.host} needs a token: --token or ${TOKEN_ENV}", file=sys.stderr)
        return 2
    if args.max_runs < 1:
        print("error: --max-runs must be at least 1", file=sys.stderr)
        return 2
    from harness.app.serve.config import ConfigError, load_settings

    try:
        settings = load_settings(args.config, args.model, args.limit)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    import uvicorn

    from harness.app.serve.api import create_app

    app = create_app(args.workspace, max_runs=args.max_runs, token=token, settings=settings)
    where = f"http://{args.host}:{args.port}/" + (f"?token=<token>" if token else "")
    print(f"workbench on {where} (workspace {app.state.workspace.root}; models {', '.join(settings.names())})",
          flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
