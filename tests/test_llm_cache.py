"""The LLM response cache: a hit pays nothing, a changed setting misses, a resumed run calls the model no twice."""

from __future__ import annotations

import json

from harness.llm.cache import CachedLLM
from tests.doubles import ScriptedLLM

MSGS = [{"role": "user", "content": "plan please"}]


def counting(calls: list):
    def fn(messages, **request):
        calls.append(request)
        return json.dumps({"n": len(calls), "t": request.get("temperature")})
    return ScriptedLLM(fn=fn)


def test_hit_miss_and_settings_that_change_the_answer(tmp_path) -> None:
    calls: list = []
    llm = CachedLLM(counting(calls), tmp_path / "llm_cache.db")
    first = llm.complete(MSGS, seed=1)[0].text
    assert llm.complete(MSGS, seed=1, timeout_s=30)[0].text == first  # a deadline does not change the answer
    assert len(calls) == 1 and llm.hits == 1
    llm.complete(MSGS, seed=2)  # another seed
    llm.complete(MSGS, seed=1, temperature=0.1)  # another sampling setting
    llm.complete(MSGS, seed=1, response_format={"type": "json_object"})  # another format
    llm.complete(MSGS + [{"role": "user", "content": "more"}], seed=1)  # other messages
    llm.complete(MSGS)  # no seed: never cached
    llm.complete(MSGS)
    assert len(calls) == 7 and llm.hits == 1 and llm.misses == 7
    assert llm.stats()["stored"] == 5


def test_the_key_of_a_request_is_the_one_older_cache_files_hold(tmp_path) -> None:
    """Run folders keep their llm_cache.db across versions: a key that changed would pay every answer again."""
    from harness.llm.base import CompletionRequest

    llm = CachedLLM(ScriptedLLM(["a"]), tmp_path / "c.db")
    request = CompletionRequest([{"role": "user", "content": "hi"}], seed=3, n=2, stop=["x"],
                                response_format={"type": "json_object"})
    assert llm.key(request) == "bb31519db8691ccaa21d2eb73818229c4753f9800564f455d375f86908ee8328"
    assert llm.key(CompletionRequest(request.messages)) is None  # no seed: never cached


def test_a_second_process_reuses_the_file_and_another_model_does_not(tmp_path) -> None:
    calls: list = []
    CachedLLM(counting(calls), tmp_path / "c.db").complete(MSGS, seed=1)
    again = CachedLLM(counting(calls), tmp_path / "c.db")  # as a resumed run would open it
    again.complete(MSGS, seed=1)
    assert len(calls) == 1 and again.hits == 1
    class Other(ScriptedLLM):
        @property
        def description(self) -> str:
            return "another model"

    CachedLLM(Other(fn=lambda m, **r: (calls.append(r), "{}")[1]), tmp_path / "c.db").complete(MSGS, seed=1)
    assert len(calls) == 2


def test_errors_are_not_cached(tmp_path) -> None:
    from harness.llm.base import LLMResponse

    calls: list = []

    class Flaky(ScriptedLLM):
        def _complete(self, request):
            calls.append(1)
            return [LLMResponse(error="boom")] if len(calls) == 1 else [LLMResponse(text="fine")]

    llm = CachedLLM(Flaky(fn=lambda m, **r: ""), tmp_path / "c.db")
    assert llm.complete(MSGS, seed=3)[0].error == "boom"
    assert llm.complete(MSGS, seed=3)[0].text == "fine"
    assert llm.complete(MSGS, seed=3)[0].text == "fine" and len(calls) == 2


def test_a_repeated_workflow_run_calls_the_model_no_twice(tmp_path) -> None:
    """What a killed-and-resumed evaluation does: the same workflow on the same task and seed again."""
    import benchmarks
    from tests.doubles import scripted_role_output
    from workflows.runner import run_workflow

    task = benchmarks.load_suite("synthetic", names=["chem_react_synth_00"], n_train=60, n_test=20, n_ood=20)[0]
    calls: list = []

    def fn(messages, **request):
        calls.append(1)
        return scripted_role_output(messages, **request)

    tiny = {"time_budget": 1, "population_size": 20, "generations": 3, "max_length": 15}
    llm = CachedLLM(ScriptedLLM(fn=fn), tmp_path / "llm_cache.db")
    first = run_workflow(task, (0, 1, 1, 0, 0), None, llm, sr_settings=tiny, seed=4)
    assert len(calls) == 3
    again = CachedLLM(ScriptedLLM(fn=fn), tmp_path / "llm_cache.db")
    second = run_workflow(task, (0, 1, 1, 0, 0), None, again, sr_settings=tiny, seed=4)
    assert len(calls) == 3 and again.hits == 3  # every role call answered from the cache
    assert first.llm_calls == second.llm_calls == 3


def test_an_answer_cut_by_the_clients_deadline_is_returned_but_never_stored(tmp_path) -> None:
    """A loaded machine cuts the embedded model's answer at its deadline: that text is the machine's, so a cached
    copy would make every later evaluation of the pair read the machine's load as the model's answer."""
    calls: list = []

    def fn(messages, **request):
        calls.append(request)
        return {"text": '{"plan": "cut', "finish_reason": "timeout"} if len(calls) == 1 else '{"plan": "whole"}'

    llm = CachedLLM(ScriptedLLM(fn=fn), tmp_path / "c.db")
    assert llm.complete(MSGS, seed=1)[0].finish_reason == "timeout"
    assert llm.complete(MSGS, seed=1)[0].text == '{"plan": "whole"}'  # asked again, not read back
    assert llm.complete(MSGS, seed=1)[0].text == '{"plan": "whole"}' and len(calls) == 2  # the whole one is kept
