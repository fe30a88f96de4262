"""Typed nodes of a search run: what kind of step a node is, where it sits (R-C-L-K) and how it hangs off its parent.

``nodes.jsonl`` keeps its plain layout (``kind`` a string such as ``"role:planner"``, flat ``R``/``C``/``L``/``K``,
``parent`` an id, ``relation`` a word), so older files still load; in memory a node's kind is a :class:`NodeKind`
(a ``str`` that also knows its :class:`NodeType` and role), its place a :class:`SearchCoordinate` and its edge a
:class:`ParentLink`, as in SRHarness's search tree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Literal, get_args

from harness.core.jsonio import json_restore, json_safe


class NodeType(str, Enum):
    """What a node records."""

    __str__ = str.__str__
    __format__ = str.__format__

    AGENT_STEP = "agent_step"  # one R-C-L-K step of the tool-calling agent
    TOOLS = "tools"  # a role's tool step before it answers (``tools:<role>``)
    ROLE = "role"  # a role's structured answer (``role:<role>``)
    SR = "sr"  # an SR run of a workflow branch
    COMBINE = "combine"  # term combination over the branches' equations
    EVOLVE = "evolve"  # one round of the evolution channel: the model's skeletons from the pool's best, fitted
    USER_MESSAGE = "user_message"  # guidance the user sent while the run went on
    CONTROL = "control"  # pause / resume / stop from the user
    OTHER = "other"  # a kind this version does not know (a newer file); the text is kept


_WITH_ROLE = (NodeType.TOOLS, NodeType.ROLE)


class NodeKind(str):
    """A node's kind as written in ``nodes.jsonl`` (``"sr"``, ``"role:planner"``), with its type and role.

    A ``str``, so comparisons with the written form and JSON keep working; build one with :meth:`of` or
    :meth:`parse`."""

    type: NodeType
    role: str | None

    def __new__(cls, text: str) -> "NodeKind":
        head, _, role = str(text).partition(":")
        try:
            kind_type = NodeType(head)
        except ValueError:
            kind_type = NodeType.OTHER
        if kind_type in _WITH_ROLE and not role:
            raise ValueError(f"node kind {text!r} needs a role ('{head}:<role>')")
        if kind_type not in _WITH_ROLE and kind_type is not NodeType.OTHER and role:
            raise ValueError(f"node kind {text!r}: '{head}' takes no role")
        self = super().__new__(cls, text)
        self.type = kind_type
        self.role = role or None
        return self

    @classmethod
    def of(cls, kind_type: NodeType, role: str | None = None) -> "NodeKind":
        return cls(f"{kind_type.value}:{role}" if role else kind_type.value)

    @classmethod
    def parse(cls, text: "str | NodeKind") -> "NodeKind":
        return text if isinstance(text, NodeKind) else cls(text)


# How a node hangs off its parent.
Relation = Literal[
    "follows",  # the next step of the same agent or role (tool steps, agent steps)
    "answers",  # a role's answer after its own tool steps
    "builds_on",  # a plan made from the analyst's findings
    "runs",  # an SR run of a plan
    "diagnoses",  # a diagnosis of an SR run's residuals
    "repairs",  # a repaired plan from a diagnosis
    "revises",  # a plan made after seeing earlier runs (discussion)
    "combines",  # a combination or synthesis over earlier results
    "evolves",  # model-written equations made from the pool's best so far (the evolution channel)
    "interjects",  # a user message or control arriving after this node
]
RELATIONS: tuple[str, ...] = get_args(Relation)


def relation_between(parent: NodeKind | None, child: NodeKind) -> Relation | None:
    """The relation implied by the two kinds: one rule for every writer, so callers need not say it."""
    if parent is None:
        return None
    t = child.type
    if t in (NodeType.USER_MESSAGE, NodeType.CONTROL):
        return "interjects"
    if t is NodeType.SR:
        return "runs"
    if t is NodeType.COMBINE:
        return "combines"
    if t is NodeType.EVOLVE:
        return "evolves"
    if t is NodeType.ROLE:
        if parent.type is NodeType.TOOLS and parent.role == child.role:
            return "answers"
        by_role: dict[str | None, Relation] = {"diagnoser": "diagnoses", "repairer": "repairs",
                                                "synthesizer": "combines"}
        if child.role in by_role:
            return by_role[child.role]
        return "builds_on" if parent.type is NodeType.ROLE and parent.role == "analyst" else "revises"
    return "follows"


@dataclass(frozen=True)
class SearchCoordinate:
    """Where a step sits in the R-C-L-K search: restart, context, loop step, sample (``None`` where not used)."""

    R: int | None = None
    C: int | None = None
    L: int | None = None
    K: int | None = None


@dataclass(frozen=True)
class ParentLink:
    """The edge to a node's parent: which node, and why it follows it."""

    parent: int
    relation: Relation | None


@dataclass
class Node:
    """One step of a run: an agent step, a role call, an SR call or a user interjection, with what it produced."""

    id: int
    kind: NodeKind
    R: int | None = None
    C: int | None = None
    L: int | None = None
    K: int | None = None
    parent: int | None = None
    relation: str | None = None
    branch: str | None = None
    messages_digest: str | None = None
    response: str = ""
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    candidates: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None
    time: float = 0.0
    budget: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.kind = NodeKind.parse(self.kind)
        if self.relation is not None and self.relation not in RELATIONS:
            raise ValueError(f"node relation {self.relation!r} is not one of {RELATIONS}")

    @property
    def type(self) -> NodeType:
        return self.kind.type

    @property
    def role(self) -> str | None:
        return self.kind.role

    @property
    def coordinate(self) -> SearchCoordinate:
        return SearchCoordinate(self.R, self.C, self.L, self.K)

    @property
    def link(self) -> ParentLink | None:
        return None if self.parent is None else ParentLink(self.parent, self.relation)  # type: ignore[arg-type]

    def to_record(self) -> dict[str, Any]:
        record = json_safe(asdict(self))
        record["kind"] = str(self.kind)
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> "Node":
        """A node from a ``nodes.jsonl`` line; files written before relations existed load with ``relation=None``
        and an unknown relation word is dropped rather than failing the whole file."""
        known = {f for f in cls.__dataclass_fields__}
        fields = {k: v for k, v in json_restore(record).items() if k in known}
        if fields.get("relation") not in (None, *RELATIONS):
            fields["relation"] = None
        return cls(**fields)
