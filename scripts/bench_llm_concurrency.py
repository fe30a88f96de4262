"""Does ``complete_many`` overlap independent LLM calls? Measure it against a slow fake server.

Starts a tiny OpenAI-compatible server on 127.0.0.1 (stdlib ``ThreadingHTTPServer``) whose
``/v1/chat/completions`` sleeps ``--delay`` seconds and answers, then runs ``--calls`` independent requests
through the ``openai`` provider: one after another, then concurrently via ``complete_many``. With a server that
can serve requests in parallel (vLLM, hosted APIs) the concurrent wall time should approach one delay.

    python scripts/bench_llm_concurrency.py [--calls 8] [--delay 1.0] [--workers 8]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness.llm import make_llm


def start_server(delay: float) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            time.sleep(delay)
            text = f"answer to {body['messages'][-1]['content']}"
            data = json.dumps(
                {
                    "id": "bench",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "bench"),
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    ],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--delay", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args()

    server = start_server(args.delay)
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    client = make_llm({"provider": "openai", "model": "bench", "base_url": url, "timeout_s": 30})
    requests = [{"messages": [{"role": "user", "content": f"question {i}"}]} for i in range(args.calls)]
    client.complete(requests[0]["messages"])  # warm up: imports, connection pool

    start = time.perf_counter()
    sequential = [client.complete(**r) for r in requests]
    t_seq = time.perf_counter() - start

    start = time.perf_counter()
    concurrent = client.complete_many(requests, max_workers=args.workers)
    t_con = time.perf_counter() - start

    assert [r[0].text for r in sequential] == [r[0].text for r in concurrent]
    assert all(r[0].ok for r in concurrent)
    server.shutdown()
    print(f"server delay {args.delay:.2f} s, {args.calls} calls, {args.workers} workers")
    print(f"sequential : {t_seq:6.2f} s")
    print(f"concurrent : {t_con:6.2f} s")
    print(f"speed-up   : {t_seq / t_con:6.2f}x  (ideal {min(args.calls, args.workers)}x)")


if __name__ == "__main__":
    main()
