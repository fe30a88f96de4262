"""The real embedded model (marked ``llm``): structured output and tool calls through llama.cpp, its state cache,
threads, and the same model behind llama.cpp's OpenAI-compatible server."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import jsonschema
import pytest

from harness.llm import (
    LLMConfig,
    LLMError,
    bound_schema,
    json_schema_format,
    make_llm,
)
from harness.llm.json_output import parse_json_output

from tests.fake_llm_servers import USER, client_for, free_port


# -- the real embedded model (marked llm) -------------------------------------------------------------------------

SMALL_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
FIT_TOOL = {
    "type": "function",
    "function": {
        "name": "fit_expression",
        "description": "Fit an expression to the data.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


TINY_MODEL = "smollm2-135m-instruct"  # the plumbing is the point here, not the model: the fast one


def _gguf_path() -> str:
    from harness.llm.local_client import default_model_path

    return default_model_path(TINY_MODEL)


@pytest.fixture(scope="module")
def local_llm():
    _gguf_path()
    return make_llm({"provider": "local", "model": TINY_MODEL, "max_tokens": 96, "temperature": 0.2})


@pytest.mark.llm
def test_local_model_structured_json_and_tool_call(local_llm) -> None:
    msgs = [{"role": "user", "content": "Describe a person called Ada who is 36 years old."}]
    responses = local_llm.complete(msgs, response_format=json_schema_format(SMALL_SCHEMA), n=2)
    assert len(responses) == 2
    for r in responses:
        obj, err = parse_json_output(r.text, SMALL_SCHEMA)
        assert err is None, (r.text, r.meta)
        assert r.completion_tokens > 0 and r.prompt_tokens > 0
    [r] = local_llm.complete([{"role": "user", "content": "Fit x squared."}], tools=[FIT_TOOL])
    assert r.tool_calls and r.tool_calls[0].name == "fit_expression", (r.text, r.meta)
    assert isinstance(r.tool_calls[0].arguments.get("expression"), str)
    # the deadline stops generation (same cached model: same path, n_ctx, n_threads)
    hurried = make_llm({"provider": "local", "model": TINY_MODEL, "max_tokens": 500, "temperature": 0.9,
                        "timeout_s": 1.0})
    [t] = hurried.complete([{"role": "user", "content": "Write a very long story about a dragon."}])
    assert t.finish_reason == "timeout" and t.completion_tokens < 500


@pytest.mark.llm
def test_local_model_keeps_recent_states_and_reuses_a_shared_prefix(local_llm) -> None:
    """The RAM prompt cache: after an unrelated call evicted the KV slot, a prompt sharing a long prefix with an
    earlier call is answered exactly as without the cache (same seed, greedy) and the state is restored."""
    import harness.llm.llama_runtime as llama_runtime

    card = "Task card. " + " ".join(f"x{i}={i * 0.37:.2f}" for i in range(50))
    first = [{"role": "system", "content": card}, {"role": "user", "content": "Name one input."}]
    again = [{"role": "system", "content": card}, {"role": "user", "content": "Name two inputs."}]
    other = [{"role": "user", "content": "Say hi."}]
    [a] = local_llm.complete(first, temperature=0.0, max_tokens=8, seed=3)
    llama, _ = local_llm._model()
    assert llama.cache is not None and llama_runtime.PROMPT_CACHE_BYTES > 0
    local_llm.complete(other, temperature=0.0, max_tokens=4, seed=3)
    stored = len(llama.cache.cache_state)
    [b] = local_llm.complete(again, temperature=0.0, max_tokens=8, seed=3)
    assert stored >= 2 and len(llama.cache.cache_state) == stored + 1
    fresh = make_llm({"provider": "local", "model": TINY_MODEL, "max_tokens": 8, "temperature": 0.0,
                      "n_ctx": 2048})  # another model instance, no cache hit possible: the same answer
    [c] = fresh.complete(again, temperature=0.0, max_tokens=8, seed=3)
    assert b.text == c.text, (b.text, c.text)


def test_a_running_call_follows_the_engine_count(monkeypatch) -> None:
    """An SR run that ends during a call hands its core back to the model within the follower's period."""
    import harness.llm.llama_runtime as llama_runtime

    seen: list[int] = []
    monkeypatch.setattr(llama_runtime, "_set_threads", lambda llama, n: seen.append(n))
    counts = iter([1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2])
    follower = llama_runtime.ThreadFollower(object(), lambda: next(counts, 2))
    follower.PERIOD_S = 0.01
    follower.start()
    time.sleep(0.2)
    follower.stop()
    assert seen[0] == 1 and seen[-1] == 2 and 2 in seen
    n = len(seen)
    time.sleep(0.05)
    assert len(seen) == n  # stopped: no more changes after the call


def _start_llama_server(gguf: str, port: int, log_path: str) -> subprocess.Popen:
    """``python -m llama_cpp.server`` with the default chat format: its handler turns a *named* ``tool_choice``
    into a grammar-constrained call, so no ``--chat_format chatml-function-calling`` is needed."""
    from harness.llm.cpu_kernels import choose_kernels

    # llama.cpp's server has no kernel option: on a CPU whose fast kernels crash (harness.llm.cpu_kernels) it runs
    # inside kernels_for_new_models, with the kernels this machine's probe chose
    kernels = choose_kernels(gguf, "auto", 1)
    serve = ("import runpy, sys; from harness.llm.cpu_kernels import kernels_for_new_models as k\n"
             f"with k({kernels!r}): runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)")
    cmd = [sys.executable, "-c", serve, "--model", gguf, "--n_threads", "1",
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"]
    with open(log_path, "wb") as log:  # a file, not a pipe: the loader's chatter would fill a pipe and block
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            with open(log_path, errors="replace") as log:
                raise RuntimeError(f"llama_cpp.server exited: {log.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            time.sleep(0.25)
    proc.kill()
    raise RuntimeError("llama_cpp.server did not come up within 60 s")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory):
    gguf = _gguf_path()
    port = free_port()
    proc = _start_llama_server(gguf, port, str(tmp_path_factory.mktemp("llama_server") / "server.log"))
    yield proc, f"http://127.0.0.1:{port}/v1"
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.llm
def test_openai_client_against_llama_cpp_server(llama_server) -> None:
    _, url = llama_server
    client = client_for(url, timeout_s=60, max_tokens=96, temperature=0.2)
    [plain] = client.complete([{"role": "user", "content": "Say hello."}], max_tokens=16)
    assert plain.text.strip() and plain.completion_tokens > 0

    msgs = [{"role": "user", "content": "Describe a person called Ada who is 36 years old."}]
    [r] = client.complete(msgs, response_format=json_schema_format(bound_schema(SMALL_SCHEMA, 40)))
    obj, err = parse_json_output(r.text, SMALL_SCHEMA)
    assert err is None, (r.text, r.meta, client.structured_mode)
    assert client.structured_mode in ("json_schema", "json_object", "prompt")

    forced = {"type": "function", "function": {"name": "fit_expression"}}
    [t] = client.complete([{"role": "user", "content": "Fit x squared."}], tools=[FIT_TOOL], tool_choice=forced)
    assert t.tool_calls, (t.text, t.meta)
    call = t.tool_calls[0]
    assert call.name == "fit_expression" and call.parse_error is None and isinstance(call.arguments, dict)
    jsonschema.validate(call.arguments, FIT_TOOL["function"]["parameters"])


@pytest.mark.llm
def test_server_killed_mid_series_ends_in_llm_error(llama_server) -> None:
    proc, url = llama_server
    client = client_for(url, timeout_s=30, max_tokens=8, max_retries=2, backoff_s=0.05)
    assert client.complete(USER)[0].completion_tokens > 0
    proc.terminate()
    proc.wait(10)
    for _ in range(3):
        with pytest.raises(LLMError, match="connection error"):  # refused at once, not a 30 s timeout
            client.complete(USER)
    assert client.usage.failures == 3 and client.usage.retries == 6


def test_the_embedded_model_waits_longer_than_a_server_unless_told():
    """A role prompt on one thread beside an SR run takes over a minute to evaluate on 2 cores: the generic 60 s
    per-attempt limit would cut it before its first token, so the local client waits LOCAL_TIMEOUT_S unless the
    config sets a limit."""
    from harness.llm.local_client import LOCAL_TIMEOUT_S, LocalLlamaClient

    assert LocalLlamaClient(LLMConfig(provider="local")).timeout_s == LOCAL_TIMEOUT_S > LLMConfig().timeout_s
    assert LocalLlamaClient(LLMConfig(provider="local", timeout_s=7)).timeout_s == 7.0


def test_the_embedded_model_takes_the_cores_the_process_may_use_not_the_machines():
    """Pinned to one core (taskset, a SLURM task, a pytest-xdist worker), the model loads one thread: two threads on
    one core wait on each other at every layer."""
    code = ("from harness.llm import LLMConfig; from harness.llm.local_client import LocalLlamaClient; "
            "print(LocalLlamaClient(LLMConfig(provider='local')).max_threads())")
    core = min(os.sched_getaffinity(0))
    one_core = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    assert one_core.stdout.split() == ["1"]
    from harness.core.resources import usable_cpus
    from harness.llm.local_client import LocalLlamaClient

    assert LocalLlamaClient(LLMConfig(provider="local")).max_threads() == min(8, usable_cpus())


def test_a_provider_is_checked_before_anything_is_imported(tmp_path, monkeypatch) -> None:
    """Naming a module runs it: text that is no import path, or a module that does not exist, is refused first,
    and finding a module does not run it (only the import does, for the configuration's own choice)."""
    from harness.llm.factory import check_provider, client_class

    (tmp_path / "probe_provider.py").write_text(
        "from pathlib import Path\nPath(__file__).with_name('ran').write_text('x')\nclass Client:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for bad in ("os.system('x')", "probe_provider.Client\n", "../probe_provider.Client", "probe_provider", ""):
        with pytest.raises(ValueError, match="not one of local, openai, vllm nor an import path"):
            check_provider(bad)
    with pytest.raises(ValueError, match="no module named 'no_such_provider_mod'"):
        check_provider("no_such_provider_mod.Client")
    assert check_provider("probe_provider:Client") == ("probe_provider", "Client")
    assert check_provider("local") == ("harness.llm.local_client", "LocalLlamaClient")
    assert not (tmp_path / "ran").exists()
    with pytest.raises(ValueError, match="is not an LLMClient class"):
        client_class("probe_provider.Client")  # the operator's own choice is imported, then checked
    assert (tmp_path / "ran").exists()
    sys.modules.pop("probe_provider", None)

