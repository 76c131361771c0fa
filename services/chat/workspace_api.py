"""The workspace reads of `ChatService` (GetWorkspace, ListArtifacts, GetArtifact): request checks and
the proto shapes. The servicer delegates to `WorkspaceReads`; SQL is in `services.chat.workspace_store`.
"""

from __future__ import annotations

from agentfeedback.chat.v1 import chat_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from services.chat import workspace as ws
from services.chat.domain import parse_instance_name
from services.chat.workspace_store import WorkspaceStore
from services.common import pages
from services.common.errors import InvalidArgument, NotFound
from services.common.ids import MAX_ARTIFACT_ID, decimal_id, parse_name


def _ts(dt) -> Timestamp:
    t = Timestamp()
    t.FromDatetime(dt)
    return t


def artifact_pb(v: ws.ArtifactVersion, changed: bool = False) -> chat_pb2.Artifact:
    return chat_pb2.Artifact(
        name=v.name, artifact_id=v.artifact_id, title=v.title, media_type=v.media_type, version=v.version,
        content=v.content, turn_index=v.turn_index, create_time=_ts(v.create_time), changed=changed,
    )


def workspace_pb(view: ws.WorkspaceView) -> chat_pb2.Workspace:
    name = ws.WORKSPACE_PATTERN.format(view.instance_id)
    snap = view.snapshot
    if snap is None:
        return chat_pb2.Workspace(name=name, turn_index=view.turn_index, snapshot_turn_index=-1,
                                  objective=chat_pb2.Objective(set_turn_index=-1))
    st = snap.state
    return chat_pb2.Workspace(
        name=name, turn_index=view.turn_index, snapshot_turn_index=snap.turn_index, trace_id=snap.trace_id,
        snapshot_time=_ts(snap.create_time),
        objective=chat_pb2.Objective(text=st.objective, changed=view.changed(ws.OBJECTIVE),
                                     set_turn_index=st.objective_turn),
        plan=chat_pb2.Plan(steps=[chat_pb2.PlanStep(text=s.text, state=int(s.state)) for s in st.plan],
                           changed=view.changed(ws.PLAN)),
        artifacts=[artifact_pb(a, view.artifact_changed(a.artifact_id)) for a in view.artifacts],
        artifacts_changed=view.changed(ws.ARTIFACT),
        preferences=chat_pb2.Preferences(
            items=[chat_pb2.Preference(text=p.text, source=int(p.source), turn_index=p.turn_index)
                   for p in st.preferences],
            changed=view.changed(ws.PREFERENCES)),
    )


def parse_artifact_name(name: str, field_path: str = "name") -> tuple[str, int]:
    """`instances/{instance}/artifacts/{artifact_id}` (id ≥ 1) → (instance id, artifact id)."""
    instance_id, raw = parse_name(name, ws.ARTIFACT_PATTERN, field_path)
    artifact_id = decimal_id(raw)
    if artifact_id is None:
        raise InvalidArgument(field_path, "must look like instances/{id}/artifacts/{artifact_id} with a decimal "
                              "id ≥ 1 and no leading zero")
    return instance_id, artifact_id


def _turn_index(request) -> int | None:
    if not request.HasField("turn_index"):
        return None
    if request.turn_index < 0:
        raise InvalidArgument("turn_index", "must be 0 or more (turns count from 0)")
    return request.turn_index


class WorkspaceReads:
    def __init__(self, store: WorkspaceStore):
        self._store = store

    async def get_workspace(self, owner: str, request: chat_pb2.GetWorkspaceRequest) -> chat_pb2.Workspace:
        """chat.proto GetWorkspace (errors there)."""
        instance_id = parse_name(request.name, ws.WORKSPACE_PATTERN, "name")[0]
        turn_index = _turn_index(request)
        view = await self._store.view(owner, instance_id, turn_index)
        if view is None:
            raise NotFound(f"instances/{instance_id}")
        if isinstance(view, int):
            raise NotFound(f"instances/{instance_id} turn {turn_index} (the next turn is {view})")
        return workspace_pb(view)

    async def list_artifacts(self, owner: str, request: chat_pb2.ListArtifactsRequest) -> chat_pb2.ListArtifactsResponse:
        """chat.proto ListArtifacts (errors there). Keyset on artifact id, the token bound to the filters."""
        instance_id = parse_instance_name(request.parent, "parent")
        turn_index = _turn_index(request)
        size = pages.page_size(request.page_size, default=100)
        filters = f"artifacts|{instance_id}|{'' if turn_index is None else turn_index}"

        async def fetch(after: int | None, n: int) -> list:
            rows = await self._store.list_artifacts(owner, instance_id, turn_index, after or 0, n + 1)
            if rows is None:
                raise NotFound(request.parent)
            return rows

        got = await pages.page(request.page_token, size, filters,
                               lambda pos: pages.page_token_int(pos.get("a"), 0, MAX_ARTIFACT_ID), fetch,
                               lambda v: artifact_pb(v, changed=turn_index is not None),
                               lambda v: {"a": v.artifact_id})
        return chat_pb2.ListArtifactsResponse(artifacts=got.items, next_page_token=got.next_page_token)

    async def get_artifact(self, owner: str, request: chat_pb2.GetArtifactRequest) -> chat_pb2.Artifact:
        """chat.proto GetArtifact (errors there)."""
        instance_id, artifact_id = parse_artifact_name(request.name)
        if request.version < 0:
            raise InvalidArgument("version", "must be 0 (the latest) or a version ≥ 1")
        v = await self._store.artifact(owner, instance_id, artifact_id, request.version)
        if v is None:
            raise NotFound(request.name if not request.version else f"{request.name} version {request.version}")
        return artifact_pb(v)
