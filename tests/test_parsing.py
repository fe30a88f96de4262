"""Tool-call protocols and tolerant JSON parsing (no model needed)."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from harness.llm.base import LLMResponse, ToolCall
from harness.llm.json_output import extract_json, parse_json_output
from harness.llm.protocols import (
    JSONToolParser,
    NativeToolParser,
    TaggedTextParser,
    make_parser,
    normalize_tools,
    tool_call_schema,
)
from harness.llm.text_rendering import add_system_text, messages_as_text
from harness.tools.base import BaseTool, ToolCallResult

FIT_TOOL = {
    "type": "function",
    "function": {
        "name": "fit",
        "description": "Fit an expression.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


class Echo(BaseTool):
    name = "echo_test_tool"

    def execute(self, text: str) -> str:
        """Repeat text.

        Args:
            text: what to repeat.
        """
        return text


class Answer(BaseModel):
    expression: str
    confidence: float = 0.5


# -- parse_json_output --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        '{"expression": "x**2", "confidence": 0.9}',
        'Sure! Here is the answer:\n```json\n{"expression": "x**2", "confidence": 0.9}\n```\nHope it helps.',
        'The result is {"expression": "x**2", "confidence": 0.9,} as requested',
        '```\n{"expression": "x**2",\n "confidence": 0.9,\n}\n```',
        "{'expression': 'x**2', 'confidence': 0.9}",
        'prose {not json} then {"expression": "x**2", "confidence": 0.9}',
    ],
)
def test_parse_json_output_tolerates_common_noise(text: str) -> None:
    obj, err = parse_json_output(text, Answer)
    assert err is None, err
    assert obj == Answer(expression="x**2", confidence=0.9)


def test_parse_json_output_raw_newline_in_string() -> None:
    obj, err = parse_json_output('{"expression": "line one\nline two"}', Answer)
    assert err is None
    assert obj.expression == "line one\nline two"


def test_parse_json_output_with_schema_dict_and_none() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert parse_json_output('x {"a": 3} y', schema) == ({"a": 3}, None)
    obj, err = parse_json_output('{"a": "three"}', schema)
    assert obj is None and "schema" in err and "a" in err
    assert parse_json_output("[1, 2]", None) == ([1, 2], None)
    assert parse_json_output("here: [1, 2]", {"type": "array"}) == ([1, 2], None)


def test_parse_json_output_errors_are_clear() -> None:
    obj, err = parse_json_output("", Answer)
    assert obj is None and "empty" in err
    obj, err = parse_json_output("I think the answer is x squared.", Answer)
    assert obj is None and "no JSON object" in err
    obj, err = parse_json_output('{"expression": "x", "confidence": "high"}', Answer)
    assert obj is None and "confidence" in err and "Answer" in err
    obj, err = parse_json_output('{"expression": "x", ', Answer)
    assert obj is None and err


def test_first_valid_candidate_wins() -> None:
    text = 'first {"other": 1} then {"expression": "y", "confidence": 1}'
    obj, err = parse_json_output(text, Answer)
    assert err is None and obj.expression == "y"
    assert extract_json(text) == ({"other": 1}, None)


# -- native -------------------------------------------------------------------------------------------------------


def test_native_parser_reads_tool_calls_and_formats_results() -> None:
    parser = NativeToolParser()
    assert parser.format_tools([FIT_TOOL]) == {"kwargs": {"tools": [FIT_TOOL]}, "system": ""}
    response = LLMResponse(tool_calls=[ToolCall(id="c1", name="fit", arguments={"expression": "x"})])
    calls = parser.parse_response(response)
    assert calls == [ToolCall(id="c1", name="fit", arguments={"expression": "x"})]
    assert parser.last_errors == []
    msg = parser.format_assistant_message(response)
    assert msg["tool_calls"][0]["function"] == {"name": "fit", "arguments": '{"expression": "x"}'}
    results = [ToolCallResult(tool_name="fit", ok=True, result_str="mse=0.1", call_id="c1")]
    assert parser.format_tool_result_messages(results) == [
        {"role": "tool", "tool_call_id": "c1", "name": "fit", "content": "mse=0.1"}
    ]


def test_native_parser_malformed_arguments_and_text_fallback() -> None:
    parser = NativeToolParser()
    broken = LLMResponse(tool_calls=[ToolCall(id="c1", name="fit", parse_error="invalid JSON")])
    assert parser.parse_response(broken) == []
    assert parser.last_errors and "fit" in parser.last_errors[0]
    tagged = LLMResponse(text='<tool_call>{"name": "fit", "arguments": {"expression": "x"}}</tool_call>')
    assert [c.name for c in parser.parse_response(tagged)] == ["fit"]
    assert parser.parse_response(LLMResponse(text="just text")) == []
    assert parser.last_errors == []


# -- JSON protocol ------------------------------------------------------------------------------------------------


def test_json_parser_cases() -> None:
    parser = JSONToolParser()
    fmt = parser.format_tools([FIT_TOOL])
    assert fmt["kwargs"] == {} and '"tool"' in fmt["system"] and "fit" in fmt["system"]
    calls = parser.parse_response('{"tool": "fit", "arguments": {"expression": "x**2"}}')
    assert len(calls) == 1 and calls[0].name == "fit" and calls[0].arguments == {"expression": "x**2"}
    assert calls[0].id.startswith("call_")
    # prose around, fences, arguments as a JSON string
    calls = parser.parse_response('Ok.\n```json\n{"tool": "fit", "arguments": "{\\"expression\\": \\"x\\"}"}\n```')
    assert calls[0].arguments == {"expression": "x"}
    # a list of calls
    calls = parser.parse_response('[{"tool": "fit", "arguments": {}}, {"tool": "fit", "arguments": {"e": 1}}]')
    assert [c.arguments for c in calls] == [{}, {"e": 1}]
    # no call: plain text or a JSON answer without a tool key
    assert parser.parse_response("The answer is 42.") == [] and parser.last_errors == []
    assert parser.parse_response('{"expression": "x"}') == [] and parser.last_errors == []
    # malformed attempt
    assert parser.parse_response('{"tool": "fit", "arguments": {"expression": "x"') == []
    assert parser.last_errors and "could not read" in parser.last_errors[0]
    assert parser.parse_response('{"tool": "fit", "arguments": [1, 2]}') == []
    assert "JSON object" in parser.last_errors[0]


def test_json_parser_constrain_and_results() -> None:
    parser = JSONToolParser(constrain=True)
    rf = parser.format_tools([FIT_TOOL])["kwargs"]["response_format"]
    assert rf["type"] == "json_schema"
    schema = rf["json_schema"]["schema"]
    assert schema["properties"]["tool"]["enum"] == ["fit"]
    msgs = parser.format_tool_result_messages(
        [ToolCallResult(tool_name="fit", ok=False, error="boom", result_str="Error: boom")]
    )
    assert msgs[0]["role"] == "user" and "Error: boom" in msgs[0]["content"]


# -- tagged -------------------------------------------------------------------------------------------------------


def test_tagged_parser_cases() -> None:
    parser = TaggedTextParser()
    fmt = parser.format_tools([FIT_TOOL])
    assert "<tool_call>" in fmt["system"] and "<tools>" in fmt["system"] and fmt["kwargs"] == {}
    text = (
        "Let me try two.\n<tool_call>\n{\"name\": \"fit\", \"arguments\": {\"expression\": \"x\"}}\n</tool_call>\n"
        '<tool_call>{"name": "fit", "arguments": {"expression": "y"}}</tool_call>'
    )
    calls = parser.parse_response(text)
    assert [c.arguments["expression"] for c in calls] == ["x", "y"]
    # unclosed final tag (generation stopped at the stop token)
    calls = parser.parse_response('<tool_call>{"name": "fit", "arguments": {"expression": "z"}}')
    assert calls[0].arguments == {"expression": "z"}
    assert parser.parse_response("no tags here") == [] and parser.last_errors == []
    assert parser.parse_response("<tool_call>{\"name\": \"fit\", \"arguments\": </tool_call>") == []
    assert parser.last_errors and "could not read" in parser.last_errors[0]
    assert parser.parse_response('<tool_call>{"arguments": {}}</tool_call>') == []
    assert "no tool name" in parser.last_errors[0]
    msgs = parser.format_tool_result_messages([ToolCallResult(tool_name="fit", ok=True, result_str="r=1")])
    assert msgs[0]["content"].startswith("<tool_response>")
    assert json.loads(msgs[0]["content"].split("\n")[1]) == {"tool": "fit", "ok": True, "result": "r=1"}


# -- helpers ------------------------------------------------------------------------------------------------------


def test_normalize_tools_accepts_basetool_and_dicts() -> None:
    tools = normalize_tools([Echo, FIT_TOOL, FIT_TOOL["function"]])
    assert [t["function"]["name"] for t in tools] == ["echo_test_tool", "fit", "fit"]
    assert tools[0]["function"]["parameters"]["required"] == ["text"]
    with pytest.raises(TypeError):
        normalize_tools([42])


def test_tool_call_schema_is_an_anyof_over_tools() -> None:
    schema = tool_call_schema([FIT_TOOL, Echo])
    assert [o["properties"]["tool"]["enum"] for o in schema["anyOf"]] == [["fit"], ["echo_test_tool"]]
    import jsonschema

    jsonschema.validate({"tool": "fit", "arguments": {"expression": "x"}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"tool": "nope", "arguments": {}}, schema)


def test_prepare_and_messages_as_text() -> None:
    parser = make_parser("tagged")
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    msgs, kwargs = parser.prepare(history, [FIT_TOOL])
    assert msgs[0]["content"].startswith("Be brief.") and "<tools>" in msgs[0]["content"] and kwargs == {}
    assert add_system_text([{"role": "user", "content": "hi"}], "S")[0] == {"role": "system", "content": "S"}
    history = [
        {"role": "assistant", "content": None, "tool_calls": [ToolCall("c1", "fit", {"expression": "x"}).to_openai()]},
        {"role": "tool", "tool_call_id": "c1", "name": "fit", "content": "ok"},
    ]
    tagged = messages_as_text(history)
    assert "<tool_call>" in tagged[0]["content"] and tagged[1]["role"] == "user"
    as_json = messages_as_text(history, style="json")
    assert json.loads(as_json[0]["content"]) == {"tool": "fit", "arguments": {"expression": "x"}}
    with pytest.raises(KeyError):
        make_parser("xml")


def test_a_cut_off_tool_call_is_an_error_not_its_nested_object():
    """Seen from SmolLM2 behind vllm serve: the answer hit max_tokens inside the call; the nested object that
    happens to have a "name" key must not become a call."""
    text = ('<tool_call>\n{"name": "evaluate_expression", "arguments": [\n  {"name": "Chrono-Europa", '
            '"description": {"type": "T"}}, {"name": "more')
    outcome = TaggedTextParser().parse(text)
    assert outcome.calls == [] and "cut off" in outcome.errors[0]
    whole = TaggedTextParser().parse('<tool_call>{"name": "fit", "arguments": {"x": {"name": "y"}}}</tool_call>')
    assert [c.name for c in whole.calls] == ["fit"] and whole.calls[0].arguments == {"x": {"name": "y"}}


def test_a_cut_off_json_answer_says_so():
    schema = {"type": "object", "properties": {"h": {"type": "array"}, "note": {"type": "string"}},
              "required": ["h", "note"]}
    value, error = parse_json_output('{"h":[],"note":"1000000000000000', schema)
    assert value is None and error.startswith("the JSON object never closes")
    assert parse_json_output('{"h": [], "note": "ok"}', schema) == ({"h": [], "note": "ok"}, None)
