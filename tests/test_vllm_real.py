"""Both vLLM paths against a real vLLM (runs where ``vllm`` imports: the environment scripts/check_vllm.py makes).

    $HARNESS_SR_CACHE/vllm-venv/bin/python -m pytest tests/test_vllm_real.py   # or the platform cache folder

The model is the Hugging Face folder the check script converts from our SmolLM2 GGUF
(``<cache>/hf/smollm2-135m-instruct``; ``HARNESS_SR_VLLM_MODEL`` points elsewhere). The project's own CI has no
vLLM: every test here is skipped there with that reason. Each engine start costs ~1-2 minutes on a 2-core CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vllm is an optional extra; scripts/check_vllm.py makes an environment with it")

from harness.llm import vllm_support as vs  # noqa: E402
from harness.llm.factory import make_llm  # noqa: E402
from harness.llm.json_output import parse_json_output  # noqa: E402
from harness.llm.models import cache_dir  # noqa: E402
from harness.sr.tools import EvaluateExpressionTool  # noqa: E402

pytestmark = pytest.mark.slow

# A 135M model loops inside free strings; the bounds let the constrained decoder end them. Prompts say exactly
# what to write: the plumbing is under test here, not the model.
SCHEMA = {"type": "object", "properties": {"hypotheses": {"type": "array", "items": {"type": "string", "maxLength": 60},
                                                          "maxItems": 2}, "note": {"type": "string", "maxLength": 80}},
          "required": ["hypotheses", "note"]}
ASK = [{"role": "user", "content": "Propose an equation for acceleration a from position x and velocity v. Answer "
                                   'in JSON: {"hypotheses": ["c0*x + c1*v"], "note": "one short sentence"}'}]
CALL = [{"role": "user", "content": 'Call evaluate_expression with {"expression": "c0*x"}.'}]
TOOLS = [EvaluateExpressionTool.openai_schema()]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    path = Path(os.environ.get("HARNESS_SR_VLLM_MODEL") or cache_dir() / "hf" / "smollm2-135m-instruct")
    if not (path / "config.json").exists():
        pytest.skip(f"no Hugging Face model folder at {path}: run scripts/check_vllm.py once to make it")
    return path


def _json_format() -> dict:
    return {"type": "json_schema", "json_schema": {"name": "plan", "schema": SCHEMA}}


def test_in_process_engine(model_dir: Path) -> None:
    os.environ.update(vs.cpu_environment())
    client = make_llm({"provider": "vllm", "model": str(model_dir), "max_tokens": 200, "n_ctx": 2048})
    [plan] = client.complete(ASK, response_format=_json_format(), temperature=0.0)
    assert parse_json_output(plan.text, SCHEMA)[1] is None, plan.text
    assert plan.prompt_tokens > 0 and plan.completion_tokens > 0

    [call] = client.complete(CALL, tools=TOOLS, temperature=0.0)
    assert call.tool_calls and call.tool_calls[0].name == "evaluate_expression"
    assert isinstance(call.tool_calls[0].arguments.get("expression"), str)

    batch = client.complete_many([{"messages": ASK, "n": 2}, {"messages": ASK, "max_tokens": 8}])
    assert [len(b) for b in batch] == [2, 1] and all(r.finish_reason for b in batch for r in b)
    assert client.usage.failures == 0 and client.usage.calls == 4


def test_openai_client_against_vllm_serve(model_dir: Path, tmp_path: Path) -> None:
    spec = vs.ServerSpec(model_dir=model_dir, served_name="smol", port=vs.free_port(), max_model_len=2048)
    process = vs.start_server(spec, tmp_path / "serve.log")
    try:
        vs.wait_healthy(spec, process)
        client = make_llm({"provider": "openai", "model": "smol", "base_url": spec.base_url, "max_tokens": 200,
                           "timeout_s": 120})
        [plan] = client.complete(ASK, response_format=_json_format(), temperature=0.0)
        assert plan.meta["structured_mode"] == "json_schema"  # vLLM takes OpenAI's json_schema as is
        assert parse_json_output(plan.text, SCHEMA)[1] is None, plan.text
        [call] = client.complete(CALL, tools=TOOLS, tool_choice="required", temperature=0.0)
        assert call.meta["tool_mode"] == "native" and call.tool_calls[0].name == "evaluate_expression"
        assert call.tool_calls[0].parse_error is None
        assert len(client.complete(ASK, n=2, max_tokens=16)) == 2 and client.supports_n is True
        counted = vs.read_metrics(spec)
        assert counted["requests"] >= 3 and counted["generation_tokens"] >= plan.completion_tokens
    finally:
        vs.stop(process)
