"""Typed nodes: kinds with their type and role, R-C-L-K coordinates, parent relations, older files still load."""

from __future__ import annotations

import json
import pickle

import pytest

from harness.runtime.nodes import Node, NodeKind, NodeType, ParentLink, SearchCoordinate
from harness.runtime.state import NODES_FILE, SearchRunState


def test_kind_knows_its_type_and_role_and_stays_its_written_text():
    kind = NodeKind("role:planner")
    assert (kind.type, kind.role) == (NodeType.ROLE, "planner")
    assert kind == "role:planner" and json.dumps({"k": kind}) == '{"k": "role:planner"}'
    assert NodeKind.of(NodeType.SR) == "sr" and NodeKind.of(NodeType.SR).role is None
    assert NodeKind.of(NodeType.TOOLS, "analyst") == "tools:analyst"
    again = pickle.loads(pickle.dumps(kind))  # nodes cross process boundaries (SR workers, Ray)
    assert again.type is NodeType.ROLE and again.role == "planner"


@pytest.mark.parametrize("bad", ["role", "tools:", "sr:planner"])
def test_malformed_kinds_are_refused(bad):
    with pytest.raises(ValueError):
        NodeKind(bad)


def test_relations_follow_from_the_kinds_of_parent_and_child(tmp_path):
    state = SearchRunState(tmp_path)
    analyst = state.add_node("role:analyst")
    tools = state.add_node(NodeKind.of(NodeType.TOOLS, "planner"), parent=analyst.id)
    plan = state.add_node("role:planner", parent=tools.id)
    sr = state.add_node("sr", parent=plan.id, at=SearchCoordinate(R=0, C=1, L=2, K=3))
    diag = state.add_node("role:diagnoser", parent=sr.id)
    repair = state.add_node("role:repairer", parent=diag.id)
    first_plan = state.add_node("role:planner", parent=analyst.id)
    talk = state.add_node("role:planner", parent=sr.id)
    combine = state.add_node("combine", parent=sr.id)
    note = state.add_node(NodeKind.of(NodeType.USER_MESSAGE), parent=combine.id, response="try exp(-t)")
    assert [n.relation for n in state.nodes] == [None, "follows", "answers", "runs", "diagnoses", "repairs",
                                                 "builds_on", "revises", "combines", "interjects"]
    assert sr.coordinate == SearchCoordinate(0, 1, 2, 3) and sr.link == ParentLink(plan.id, "runs")
    assert analyst.link is None and repair.type is NodeType.ROLE and note.type is NodeType.USER_MESSAGE
    state.finish("completed")
    loaded = SearchRunState.load(tmp_path)
    assert [(n.kind, n.relation) for n in loaded.nodes] == [(n.kind, n.relation) for n in state.nodes]
    assert loaded.nodes[3].kind.type is NodeType.SR and first_plan.relation == "builds_on" and talk.id == 7


def test_older_and_newer_files_still_load(tmp_path):
    old = {"id": 0, "kind": "role:planner", "R": None, "parent": None, "response": "x"}  # no relation field
    newer = {"id": 1, "kind": "critic:planner", "parent": 0, "relation": "argues", "response": "y"}
    torn = {"id": 2, "kind": "role", "parent": 0}
    (tmp_path / NODES_FILE).write_text("\n".join(json.dumps(r) for r in (old, newer, torn)) + "\n")
    nodes = SearchRunState.load(tmp_path).nodes
    assert [n.id for n in nodes] == [0, 1]  # a malformed kind skips the line, like a torn one
    assert nodes[0].relation is None and nodes[0].role == "planner"
    assert nodes[1].type is NodeType.OTHER and nodes[1].kind == "critic:planner" and nodes[1].relation is None


def test_a_relation_outside_the_vocabulary_is_refused_when_written(tmp_path):
    state = SearchRunState(tmp_path)
    root = state.add_node("sr")
    with pytest.raises(ValueError):
        state.add_node("sr", parent=root.id, relation="because")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Node(id=0, kind=NodeKind("sr"), relation="because")
