"""``python -m harness view <run folder>``: one self-contained HTML page of a solve, agent or optimize run.

The page needs no network when opened: plots are embedded as data URIs, equations are MathML (which browsers
render natively), the search tree is nested ``<details>`` (expandable without a script). It shows the task card,
the selected equation, the metrics per split, the Pareto front, the plots the run wrote, and the search tree:
every node with its prompt (``messages.jsonl``), answer, tool calls, SR plan and candidates. An optimize run gets
its stage table and plots instead.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
from pathlib import Path
from typing import Any, Sequence

import sympy

from harness.core.jsonio import read_jsonl
from harness.runtime.state import MESSAGES_FILE, NODES_FILE, RESULT_FILE, RUN_FILE

PLOTS = ("pareto_front.png", "pred_vs_true_id.png", "pred_vs_true_ood.png", "score_per_stage.png",
         "optimization_history.png", "refinement.png")
CSS = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#222;line-height:1.45}
h1{font-size:1.5rem}h2{font-size:1.2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left;
font-size:.9rem}th{background:#f4f4f4}code,pre{font-family:ui-monospace,monospace;font-size:.85rem}
pre{white-space:pre-wrap;background:#f8f8f8;padding:.5rem;border-radius:4px;max-height:30rem;overflow:auto}
details{margin:.2rem 0 .2rem 1rem;border-left:2px solid #ddd;padding-left:.5rem}summary{cursor:pointer}
.kind{font-weight:600}.err{color:#b00}.muted{color:#777}img{max-width:48%;margin:.3rem;border:1px solid #eee}
math{font-size:1.3rem;max-width:100%;overflow-x:auto}
"""
SCRIPT = """
document.getElementById('expand').addEventListener('click', function () {
  document.querySelectorAll('#tree details').forEach(function (d) { d.open = true; });
});
document.getElementById('collapse').addEventListener('click', function () {
  document.querySelectorAll('#tree details').forEach(function (d) { d.open = false; });
});
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _num(value: Any) -> str:
    try:
        return f"{float(value):.4g}"
    except (TypeError, ValueError):
        return _e(value) if value is not None else "–"


def mathml(equation: str, names: Sequence[str]) -> str:
    """The equation as presentation MathML (floats at 4 significant digits); the text itself if it does not parse."""
    from harness.core.expression import ExpressionError, parse_expression

    try:
        expr = parse_expression(equation, list(names)).sympy
    except (ExpressionError, TypeError, ValueError):
        return f"<code>{_e(equation)}</code>"
    expr = expr.xreplace({f: sympy.Float(f, 4) for f in expr.atoms(sympy.Float)})
    from sympy.printing.mathml import mathml as to_mathml

    body = to_mathml(expr, printer="presentation")
    return f'<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">{body}</math>'


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _task_section(task: dict[str, Any] | None) -> str:
    if not task:
        return ""
    rows = [[_e(n), _e(d)] for n, d in zip(task.get("input_names", []), task.get("input_descriptions", []) or
                                          [""] * len(task.get("input_names", [])))]
    parts = [f"<p><b>{_e(task.get('name'))}</b> <span class='muted'>{_e(task.get('domain') or '')}</span> — target "
             f"<code>{_e(task.get('target_name'))}</code>: {_e(task.get('target_description') or '')}</p>",
             _table(["input", "description"], rows),
             f"<p class='muted'>rows: train {task.get('n_train', '–')}, test_id {task.get('n_test_id', '–')}, "
             f"test_ood {task.get('n_test_ood', '–')}</p>"]
    if task.get("ground_truth"):
        parts.append(f"<p>ground truth (never shown to the model): "
                     f"{mathml(task['ground_truth'], task.get('input_names', []))}</p>")
    return "<section id='task'><h2>Task</h2>" + "".join(parts) + "</section>"


def _result_sections(result: dict[str, Any] | None, names: Sequence[str]) -> str:
    if not result:
        return "<section id='equation'><h2>Selected equation</h2><p>no result.json (the run did not finish)</p></section>"
    best = result.get("best") if isinstance(result.get("best"), dict) else None
    equation = result.get("expression") or (best or {}).get("equation")
    out = ["<section id='equation'><h2>Selected equation</h2>"]
    if equation:
        out += [mathml(equation, names), f"<p><code id='equation-text'>{_e(equation)}</code></p>",
                f"<p class='muted'>status {_e(result.get('status'))}; complexity {_e(result.get('complexity', '–'))}"
                f"; {_e(result.get('llm_calls', '–'))} LLM calls, {_e(result.get('solver_runs', '–'))} SR runs</p>"]
    else:
        out.append(f"<p>no equation found (status {_e(result.get('status'))})</p>")
    out.append("</section>")
    metrics = result.get("metrics") or (best or {}).get("metrics") or {}
    if metrics:
        keys = ["nmse", "r2", "acc_0.1", "acc_0.01", "acc_0.001"]
        rows = [[_e(split)] + [_num(m.get(k)) for k in keys] for split, m in metrics.items() if isinstance(m, dict)]
        out.append("<section id='metrics'><h2>Metrics</h2>" + _table(["split", *keys], rows) + "</section>")
    front = result.get("pareto_front") or result.get("front") or []
    if front:
        rows = [[_num(r.get("complexity")), _num(r.get("loss", (r.get("metrics") or {}).get("valid", {}).get("nmse"))),
                 f"<code>{_e(r.get('equation'))}</code>"] for r in front]
        out.append("<section id='front'><h2>Pareto front</h2>" + _table(["complexity", "loss", "equation"], rows)
                   + "</section>")
    return "".join(out)


def _plots(folder: Path) -> str:
    images = []
    for name in PLOTS:
        path = folder / name
        if path.is_file():
            data = base64.b64encode(path.read_bytes()).decode()
            images.append(f"<img alt='{_e(path.stem)}' title='{_e(path.stem)}' src='data:image/png;base64,{data}'>")
    return "<section id='plots'><h2>Plots</h2>" + "".join(images) + "</section>" if images else ""


def _node_body(node: dict[str, Any], prompts: dict[str, list[dict[str, Any]]]) -> str:
    parts = []
    messages = prompts.get(node.get("messages_digest") or "")
    if messages:
        text = "\n\n".join(f"[{m.get('role')}]\n{m.get('content')}" for m in messages)
        parts.append(f"<details><summary>prompt ({len(messages)} messages)</summary><pre>{_e(text)}</pre></details>")
    if node.get("response"):
        parts.append(f"<details><summary>answer</summary><pre>{_e(node['response'])}</pre></details>")
    for call in node.get("tool_results") or []:
        args = json.dumps(call.get("arguments", {}), ensure_ascii=False)
        state = "ok" if call.get("ok", not call.get("error")) else "failed"
        parts.append(f"<details><summary>tool <b>{_e(call.get('tool_name') or call.get('name'))}</b> ({state})"
                     f"</summary><pre>{_e(args)}\n\n{_e(call.get('result_str') or call.get('error') or '')}</pre>"
                     "</details>")
    info = node.get("info") or {}
    if info:
        parts.append(f"<details><summary>details</summary><pre>{_e(json.dumps(info, indent=1, default=str))}</pre>"
                     "</details>")
    cands = node.get("candidates") or []
    if cands:
        ranked = sorted(cands, key=lambda c: ((c.get("metrics") or {}).get("valid", {}).get("nmse") or float("inf")))
        rows = [[f"<code>{_e(c.get('equation'))}</code>", _num((c.get("metrics") or {}).get("valid", {}).get("nmse")),
                 _e(c.get("source", ""))] for c in ranked[:10]]
        parts.append(f"<details><summary>{len(cands)} candidates</summary>"
                     + _table(["equation", "valid NMSE", "source"], rows) + "</details>")
    return "".join(parts)


def _tree(nodes: list[dict[str, Any]], prompts: dict[str, list[dict[str, Any]]]) -> str:
    if not nodes:
        return ""
    ids = {n.get("id") for n in nodes}
    children: dict[Any, list[dict[str, Any]]] = {}
    for n in nodes:
        parent = n.get("parent") if n.get("parent") in ids else None
        children.setdefault(parent, []).append(n)

    def render(node: dict[str, Any], depth: int) -> str:
        error = f" <span class='err'>{_e(str(node['error'])[:160])}</span>" if node.get("error") else ""
        tokens = (node.get("prompt_tokens") or 0) + (node.get("completion_tokens") or 0)
        summary = (f"#{_e(node.get('id'))} <span class='kind'>{_e(node.get('kind'))}</span> "
                   f"<span class='muted'>{_e(node.get('branch') or '')} · {_num(node.get('seconds'))} s"
                   f"{f' · {tokens} tokens' if tokens else ''}</span>{error}")
        kids = "".join(render(c, depth + 1) for c in children.get(node.get("id"), []) if depth < 200)
        return (f"<details class='node' data-kind='{_e(node.get('kind'))}'><summary>{summary}</summary>"
                f"{_node_body(node, prompts)}{kids}</details>")

    body = "".join(render(n, 0) for n in children.get(None, []))
    return ("<section id='tree'><h2>Search tree</h2><p><button id='expand'>expand all</button> "
            f"<button id='collapse'>collapse all</button> <span class='muted'>{len(nodes)} nodes</span></p>"
            f"{body}</section>")


def tree_html(folder: str | Path) -> str:
    """The search tree of a run folder as an HTML fragment (the live workbench redraws it as nodes arrive)."""
    folder = Path(folder)
    prompts = {r.get("digest"): r.get("messages") for r in read_jsonl(folder / MESSAGES_FILE)}
    return _tree(read_jsonl(folder / NODES_FILE), prompts)


def _optimize_sections(folder: Path) -> str:
    freeze = _read_json(folder / "freeze.json") or {}
    rows = freeze.get("rows") or {}
    if not rows:
        return "<section id='stages'><h2>Stages</h2><p>the freeze stage has not run yet</p></section>"
    table = []
    for stage, row in rows.items():
        train, held = row.get("train") or {}, row.get("heldout") or {}
        table.append([_e(row.get("title", stage)), _e(tuple(row.get("workflow", ()))), _num(train.get("score")),
                      _num(held.get("score")), _num(held.get("sa")), _num((train or held).get("llm_calls_per_task"))])
    final = f"<p>final harness: {_e(freeze.get('selected_stage'))}, digest <code>{_e(freeze.get('digest'))}</code></p>"
    return ("<section id='stages'><h2>Stages</h2>" + final
            + _table(["stage", "workflow", "train acc_0.01", "held-out acc_0.01", "held-out SA", "LLM calls / task"],
                     table) + "</section>")


def run_kind(folder: Path) -> str:
    if (folder / "freeze.json").exists() or (folder / "optuna.db").exists():
        return "optimize"
    run = _read_json(folder / RUN_FILE) or {}
    if (run.get("config") or {}).get("workflow") is not None:
        return "solve"
    return "agent" if (folder / NODES_FILE).exists() else "unknown"


def render(folder: str | Path) -> str:
    """The page for one run folder, as HTML text."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a run folder")
    kind = run_kind(folder)
    run = _read_json(folder / RUN_FILE) or {}
    task = run.get("task")
    result = _read_json(folder / RESULT_FILE)
    names = (result or {}).get("input_names") or (task or {}).get("input_names") or []
    prompts = {r.get("digest"): r.get("messages") for r in read_jsonl(folder / MESSAGES_FILE)}
    sections = [_task_section(task)]
    if kind == "optimize":
        sections.append(_optimize_sections(folder))
    else:
        sections.append(_result_sections(result, names))
    sections.append(_plots(folder))
    sections.append(_tree(read_jsonl(folder / NODES_FILE), prompts))
    title = f"{kind} run — {(task or {}).get('name') or folder.name}"
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{_e(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1><p class='muted'>{_e(folder.resolve())}</p>"
            + "".join(s for s in sections if s) + f"<script>{SCRIPT if '<button' in ''.join(sections) else ''}"
            "</script></body></html>")


def write_view(folder: str | Path, out: str | Path | None = None) -> Path:
    path = Path(out) if out is not None else Path(folder) / "view.html"
    path.write_text(render(folder), encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness view", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_folder", help="a solve, agent or optimize run folder")
    parser.add_argument("--out", default=None, help="the HTML file (default <run folder>/view.html)")
    args = parser.parse_args(argv)
    try:
        path = write_view(args.run_folder, args.out)
    except FileNotFoundError as exc:
        print(f"error: {exc}")
        return 2
    print(path)
    return 0
