"""The co-construction workspace of a conversation (issue 23): objective, plan, artifacts, preferences.

Plain data and pure rules (no grpc, no asyncpg). The agent proposes `Op`s with its reply; `apply`
validates each against the workspace as the earlier operations of the turn left it and applies the
valid ones in order. An invalid operation is dropped whole (a `Dropped` entry with a server-written
reason, never a client value), so a workspace is never half-applied; the turn still succeeds.
`apply` also diffs the result against the turn's base: the components the turn changed are stored
with the snapshot (`Applied.changed`), so a reader never computes it.

Limits (chat.proto `Workspace`, agent.proto `WorkspaceOperation`):
objective ≤ MAX_OBJECTIVE_CHARS, ≤ MAX_PLAN_STEPS steps of ≤ MAX_STEP_CHARS, ≤ MAX_PREFERENCES
preferences of ≤ MAX_PREFERENCE_CHARS, ≤ MAX_ARTIFACTS artifacts per conversation, title ≤
MAX_TITLE_CHARS, media type `type/subtype` ≤ MAX_MEDIA_TYPE_CHARS, content ≤ MAX_ARTIFACT_BYTES
UTF-8 bytes, no NUL anywhere, at most MAX_OPS_PER_TURN operations per turn (the rest dropped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import IntEnum

MAX_OBJECTIVE_CHARS = 1000
MAX_PLAN_STEPS = 20
MAX_STEP_CHARS = 500
MAX_PREFERENCES = 20
MAX_PREFERENCE_CHARS = 300
MAX_ARTIFACTS = 20
MAX_TITLE_CHARS = 200
MAX_MEDIA_TYPE_CHARS = 100
MAX_ARTIFACT_BYTES = 32768
MAX_OPS_PER_TURN = 32
DEFAULT_MEDIA_TYPE = "text/markdown"
# RFC 6838 restricted-name characters, lowercase.
MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*\Z")

# Component names: span attribute `workspace.component`, the stored `changed` list, rating scopes.
OBJECTIVE = "objective"
PLAN = "plan"
ARTIFACT = "artifact"
PREFERENCES = "preferences"
COMPONENTS = (OBJECTIVE, PLAN, ARTIFACT, PREFERENCES)


class StepState(IntEnum):
    """Mirrors agentfeedback.chat.v1.PlanStepState."""

    UNSPECIFIED = 0
    PENDING = 1
    DOING = 2
    DONE = 3
    DROPPED = 4


class PreferenceSource(IntEnum):
    """Mirrors agentfeedback.chat.v1.PreferenceSource."""

    UNSPECIFIED = 0
    OWNER = 1
    AGENT = 2


@dataclass(frozen=True)
class PlanStep:
    text: str
    state: StepState = StepState.PENDING


@dataclass(frozen=True)
class Preference:
    text: str
    source: PreferenceSource
    turn_index: int


@dataclass(frozen=True)
class ArtifactRef:
    """An artifact as a snapshot holds it: which version it had (the content lives with the version)."""

    artifact_id: int
    version: int
    title: str
    media_type: str


@dataclass(frozen=True)
class State:
    """The workspace at the end of one turn (one snapshot). Artifacts ordered by id."""

    objective: str = ""
    objective_turn: int = -1
    plan: tuple[PlanStep, ...] = ()
    preferences: tuple[Preference, ...] = ()
    artifacts: tuple[ArtifactRef, ...] = ()

    def artifact(self, artifact_id: int) -> ArtifactRef | None:
        return next((a for a in self.artifacts if a.artifact_id == artifact_id), None)


# -- operations (agent.proto WorkspaceOperation) -------------------------------------------------


@dataclass(frozen=True)
class SetObjective:
    text: str
    kind = "set_objective"


@dataclass(frozen=True)
class SetPlan:
    steps: tuple[PlanStep, ...]
    kind = "set_plan"


@dataclass(frozen=True)
class SetPlanStepState:
    step_index: int
    state: StepState
    kind = "set_plan_step_state"


@dataclass(frozen=True)
class PutArtifact:
    artifact_id: int  # 0: a new artifact
    title: str
    media_type: str
    content: str
    kind = "put_artifact"


@dataclass(frozen=True)
class AddPreference:
    text: str
    source: PreferenceSource
    kind = "add_preference"


@dataclass(frozen=True)
class RemovePreference:
    text: str
    kind = "remove_preference"


@dataclass(frozen=True)
class EmptyOp:
    """A WorkspaceOperation with no operation set (e.g. one a newer agent sent that this gateway
    does not know): always dropped."""

    kind = "unknown"


Op = SetObjective | SetPlan | SetPlanStepState | PutArtifact | AddPreference | RemovePreference | EmptyOp


@dataclass(frozen=True)
class ArtifactWrite:
    """A new artifact version the turn stores."""

    artifact_id: int
    version: int
    title: str
    media_type: str
    content: str


@dataclass(frozen=True)
class Update:
    """One applied operation (a `workspace.update` span)."""

    component: str
    operation: str
    artifact_id: int = 0
    artifact_version: int = 0


@dataclass(frozen=True)
class Dropped:
    """An operation that was not applied: its 0-based index in the turn, its kind and why."""

    index: int
    kind: str
    reason: str


@dataclass
class Applied:
    state: State
    writes: list[ArtifactWrite] = field(default_factory=list)
    updates: list[Update] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    next_artifact_id: int = 1
    changed: tuple[str, ...] = ()  # components the turn changed (COMPONENTS order)
    changed_artifacts: tuple[int, ...] = ()


class _Invalid(Exception):
    pass


def _text(value: str, what: str, max_chars: int, required: bool = True) -> str:
    if "\x00" in value:
        raise _Invalid(f"{what} contains NUL")
    if required and not value.strip():
        raise _Invalid(f"{what} is empty")
    if len(value) > max_chars:
        raise _Invalid(f"{what} is longer than {max_chars} characters")
    return value


def _steps(steps: tuple[PlanStep, ...]) -> tuple[PlanStep, ...]:
    if len(steps) > MAX_PLAN_STEPS:
        raise _Invalid(f"the plan has more than {MAX_PLAN_STEPS} steps")
    out = []
    for s in steps:
        _text(s.text, "a step's text", MAX_STEP_CHARS)
        state = s.state if s.state != StepState.UNSPECIFIED else StepState.PENDING
        if state not in StepState._value2member_map_:
            raise _Invalid("a step's state is unknown")
        out.append(PlanStep(s.text, StepState(state)))
    return tuple(out)


def apply(
    base: State,
    ops: list[Op] | tuple[Op, ...],
    turn_index: int,
    next_artifact_id: int,
    latest_versions: dict[int, int],
) -> Applied:
    """The workspace after `ops` of turn `turn_index` on `base` (the previous snapshot).

    `next_artifact_id`: the id a new artifact gets (ids are never reused); `latest_versions`: the
    highest stored version per artifact id (a write is that + 1). One artifact written twice in a
    turn keeps one version (the last write). Returns the new state, the versions to store, the
    applied updates, the dropped operations, and what changed against `base`.
    """
    state = base
    out = Applied(state=base, next_artifact_id=next_artifact_id)
    written: dict[int, ArtifactWrite] = {}
    for i, op in enumerate(ops):
        if i >= MAX_OPS_PER_TURN:
            out.dropped.append(Dropped(i, op.kind, f"more than {MAX_OPS_PER_TURN} operations in one turn"))
            continue
        try:
            state, update = _apply_one(state, op, turn_index, out, written, latest_versions)
        except _Invalid as e:
            out.dropped.append(Dropped(i, op.kind, str(e)))
            continue
        out.updates.append(update)
    out.state = state
    out.writes = list(written.values())
    out.changed = tuple(c for c in COMPONENTS if _differs(base, state, c) or (c == ARTIFACT and written))
    out.changed_artifacts = tuple(sorted(written))
    return out


def _apply_one(state: State, op: Op, turn_index: int, out: Applied, written: dict[int, ArtifactWrite],
               latest_versions: dict[int, int]) -> tuple[State, Update]:
    if isinstance(op, SetObjective):
        _text(op.text, "the objective", MAX_OBJECTIVE_CHARS)
        return replace(state, objective=op.text, objective_turn=turn_index), Update(OBJECTIVE, op.kind)
    if isinstance(op, SetPlan):
        return replace(state, plan=_steps(op.steps)), Update(PLAN, op.kind)
    if isinstance(op, SetPlanStepState):
        if not 0 <= op.step_index < len(state.plan):
            raise _Invalid("step_index is not a step of the plan")
        if op.state not in StepState._value2member_map_ or op.state == StepState.UNSPECIFIED:
            raise _Invalid("the step state is unspecified or unknown")
        plan = list(state.plan)
        plan[op.step_index] = PlanStep(plan[op.step_index].text, StepState(op.state))
        return replace(state, plan=tuple(plan)), Update(PLAN, op.kind)
    if isinstance(op, PutArtifact):
        return _put_artifact(state, op, out, written, latest_versions)
    if isinstance(op, AddPreference):
        _text(op.text, "the preference", MAX_PREFERENCE_CHARS)
        if any(p.text == op.text for p in state.preferences):
            raise _Invalid("the preference is already there")
        if len(state.preferences) >= MAX_PREFERENCES:
            raise _Invalid(f"there are already {MAX_PREFERENCES} preferences")
        source = op.source if op.source in (PreferenceSource.OWNER, PreferenceSource.AGENT) else PreferenceSource.AGENT
        pref = Preference(op.text, PreferenceSource(source), turn_index)
        return replace(state, preferences=(*state.preferences, pref)), Update(PREFERENCES, op.kind)
    if isinstance(op, RemovePreference):
        kept = tuple(p for p in state.preferences if p.text != op.text)
        if len(kept) == len(state.preferences):
            raise _Invalid("no preference has that text")
        return replace(state, preferences=kept), Update(PREFERENCES, op.kind)
    raise _Invalid("no operation set")


def _put_artifact(state: State, op: PutArtifact, out: Applied, written: dict[int, ArtifactWrite],
                  latest_versions: dict[int, int]) -> tuple[State, Update]:
    if "\x00" in op.content:
        raise _Invalid("the content contains NUL")
    if len(op.content.encode()) > MAX_ARTIFACT_BYTES:
        raise _Invalid(f"the content is larger than {MAX_ARTIFACT_BYTES} bytes")
    _text(op.title, "the title", MAX_TITLE_CHARS, required=False)
    media = op.media_type.lower()
    if media and (len(media) > MAX_MEDIA_TYPE_CHARS or not MEDIA_TYPE.match(media)):
        raise _Invalid("the media type is not type/subtype")
    if op.artifact_id < 0:
        raise _Invalid("artifact_id is negative")
    if op.artifact_id == 0:
        if not op.title.strip():
            raise _Invalid("a new artifact needs a title")
        if len(state.artifacts) >= MAX_ARTIFACTS:
            raise _Invalid(f"the conversation already has {MAX_ARTIFACTS} artifacts")
        aid = out.next_artifact_id
        out.next_artifact_id += 1
        title, media = op.title, media or DEFAULT_MEDIA_TYPE
    else:
        cur = state.artifact(op.artifact_id)
        if cur is None:
            raise _Invalid("artifact_id is not an artifact of the conversation")
        aid, title, media = cur.artifact_id, op.title or cur.title, media or cur.media_type
    prior = written.get(aid)
    version = prior.version if prior is not None else latest_versions.get(aid, 0) + 1
    written[aid] = ArtifactWrite(aid, version, title, media, op.content)
    ref = ArtifactRef(aid, version, title, media)
    arts = tuple(sorted((*(a for a in state.artifacts if a.artifact_id != aid), ref), key=lambda a: a.artifact_id))
    return replace(state, artifacts=arts), Update(ARTIFACT, op.kind, aid, version)


def _differs(a: State, b: State, component: str) -> bool:
    if component == OBJECTIVE:
        return a.objective != b.objective
    if component == PLAN:
        return a.plan != b.plan
    if component == PREFERENCES:
        return a.preferences != b.preferences
    return a.artifacts != b.artifacts


# -- stored form (chat.workspace_snapshots jsonb columns) ----------------------------------------


def plan_json(plan: tuple[PlanStep, ...]) -> list[dict]:
    return [{"text": s.text, "state": int(s.state)} for s in plan]


def preferences_json(prefs: tuple[Preference, ...]) -> list[dict]:
    return [{"text": p.text, "source": int(p.source), "turn": p.turn_index} for p in prefs]


def artifacts_json(arts: tuple[ArtifactRef, ...]) -> list[dict]:
    return [{"id": a.artifact_id, "v": a.version, "title": a.title, "media_type": a.media_type} for a in arts]


def state_from_json(objective: str, objective_turn: int, plan: list, preferences: list, artifacts: list) -> State:
    return State(
        objective=objective,
        objective_turn=objective_turn,
        plan=tuple(PlanStep(s["text"], StepState(s["state"])) for s in plan),
        preferences=tuple(Preference(p["text"], PreferenceSource(p["source"]), p["turn"]) for p in preferences),
        artifacts=tuple(ArtifactRef(a["id"], a["v"], a["title"], a["media_type"]) for a in artifacts),
    )


@dataclass(frozen=True)
class ArtifactVersion:
    """One stored artifact version (GetArtifact / ListArtifacts / a Workspace's artifacts)."""

    instance_id: str
    artifact_id: int
    version: int
    title: str
    media_type: str
    content: str
    turn_index: int
    create_time: object  # datetime

    @property
    def name(self) -> str:
        return f"instances/{self.instance_id}/artifacts/{self.artifact_id}"


@dataclass(frozen=True)
class Snapshot:
    """A stored end-of-turn snapshot as GetWorkspace reads it."""

    turn_index: int
    trace_id: str
    create_time: object  # datetime
    state: State
    changed: tuple[str, ...]
    changed_artifacts: tuple[int, ...]


@dataclass(frozen=True)
class WorkspaceView:
    """GetWorkspace's answer: the snapshot serving `turn_index` (None: none yet), its artifacts' contents,
    and whether the asked turn is the snapshot's own turn (else nothing `changed`)."""

    instance_id: str
    turn_index: int
    snapshot: Snapshot | None
    artifacts: tuple[ArtifactVersion, ...]

    def changed(self, component: str) -> bool:
        s = self.snapshot
        return s is not None and s.turn_index == self.turn_index and component in s.changed

    def artifact_changed(self, artifact_id: int) -> bool:
        s = self.snapshot
        return s is not None and s.turn_index == self.turn_index and artifact_id in s.changed_artifacts


ARTIFACT_PATTERN = "instances/{}/artifacts/{}"
WORKSPACE_PATTERN = "instances/{}/workspace"
