// The modal's workspace questions (taxonomy.json questions with `section: workspace`, and the ARTIFACT
// ones): one group per component as of the turn, each marked "Just updated" when the turn changed it
// (the server's flag), each question asked only when its `when` holds — `exists` (the component is
// there), `changed` (the turn changed it: delta and attribution questions), `revised` (an artifact the
// turn changed that had an earlier version). One artifact card per artifact produced or changed in the
// turn; none: one card for the live document (artifact_id 0).
import { h } from "../dom";
import type { Artifact, Workspace } from "../gen/agentfeedback/chat/v1/chat_pb";
import { ARTIFACT_QUESTIONS, LIVE_DOCUMENT, WORKSPACE_QUESTIONS, scopeOf, type Question } from "../taxonomy";
import { choiceQuestion, type ControlContext } from "./feedbackControls";
import { changedArtifacts, changedIn, existsIn, SCOPE_OF, type Component } from "./workspacePanels";

const COMPONENTS: [Component, string][] = [["objective", "The objective"], ["plan", "The plan"], ["preferences", "Your preferences"]];

export function componentApplies(q: Question, ws: Workspace, c: Component): boolean {
  if (q.when === "changed") return changedIn(ws, c);
  return existsIn(ws, c);
}

export function artifactApplies(q: Question, a: Artifact | null): boolean {
  if (q.when === "revised") return !!a && a.changed && a.version > 1;
  if (q.when === "changed") return !!a && a.changed;
  if (q.when === "exists") return !!a; // a workspace artifact, not the live document
  return true;
}

const justUpdated = (on: boolean) => (on ? h("span", { class: "just-updated", role: "status" }, "Just updated") : null);

export function workspaceSection(ws: Workspace | null | undefined, ctx: ControlContext): HTMLElement {
  if (!ws || ws.snapshotTurnIndex < 0) return h("p", { class: "muted" }, "Nothing in the workspace at this turn.");
  return h("div", {}, COMPONENTS.map(([c, title]) => {
    const qs = WORKSPACE_QUESTIONS.filter((q) => scopeOf(q) === SCOPE_OF[c] && componentApplies(q, ws, c));
    return h("section", { class: "ws-component", dataset: { component: c, changed: String(changedIn(ws, c)) } },
      h("h3", {}, title, justUpdated(changedIn(ws, c))),
      qs.length ? qs.map((q) => choiceQuestion(q, ctx)) : h("p", { class: "muted" }, "Nothing to ask yet."));
  }));
}

export function artifactCards(ws: Workspace | null | undefined, ctx: ControlContext): HTMLElement {
  const produced = ws ? changedArtifacts(ws) : [];
  const cards: [string, Artifact | null][] = produced.length ? produced.map((a) => [String(a.artifactId), a]) : [[LIVE_DOCUMENT, null]];
  return h("div", { class: "artifact-cards" }, cards.map(([id, a]) =>
    h("section", { class: "card artifact-card", dataset: { artifact: id } },
      h("h3", {}, a ? `${a.title} (v${a.version})` : "The live document", justUpdated(!!a?.changed)),
      a ? h("pre", { class: "ws-artifact-body" }, a.content.slice(0, 400)) : null,
      ARTIFACT_QUESTIONS.filter((q) => artifactApplies(q, a)).map((q) => choiceQuestion(q, { ...ctx, artifactId: id }, { withNote: true })))));
}
