// The workspace beside the chat (below it at narrow widths; collapsible): four panels — objective, plan,
// artifacts, preferences — as of the viewed turn (ChatService.GetWorkspace; the server says per component
// whether that turn changed it). Each component carries the reply's like/dislike glyph (a `reaction` rating
// of the component's scope; an artifact's with its id). A component the latest turn changed, that the owner
// has not rated for that turn, shows a pulsing "just updated" ping with a short cloud beside its glyph until
// the owner opens it (its title opens the modal's section), rates it, or the next turn arrives; under
// `prefers-reduced-motion` the ping does not pulse, the badge stays (workspace.css).
import { api, errorText } from "../api";
import { h, mount } from "../dom";
import { PlanStepState, PreferenceSource, type Artifact, type Workspace } from "../gen/agentfeedback/chat/v1/chat_pb";
import { RatingScope, RatingSentiment } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { StaleWrite, type RatingKey, type RatingStore } from "../ratings";
import { REACTION } from "../taxonomy";
import "../workspace.css";

export type Component = "objective" | "plan" | "artifacts" | "preferences";

export const SCOPE_OF: Record<Component, RatingScope> = {
  objective: RatingScope.OBJECTIVE, plan: RatingScope.PLAN, artifacts: RatingScope.ARTIFACT, preferences: RatingScope.PREFERENCES,
};
const TITLES: Record<Component, string> = { objective: "Objective", plan: "Plan", artifacts: "Artifacts", preferences: "Preferences" };
const STATE_LABEL: Record<number, string> = {
  [PlanStepState.PENDING]: "to do", [PlanStepState.DOING]: "doing", [PlanStepState.DONE]: "done", [PlanStepState.DROPPED]: "dropped",
};

/** Whether the workspace's turn changed `c` (the server's flag; never computed here). */
export function changedIn(ws: Workspace, c: Component): boolean {
  if (c === "objective") return !!ws.objective?.changed;
  if (c === "plan") return !!ws.plan?.changed;
  if (c === "preferences") return !!ws.preferences?.changed;
  return ws.artifactsChanged;
}

export function existsIn(ws: Workspace, c: Component): boolean {
  if (c === "objective") return !!ws.objective?.text;
  if (c === "plan") return !!ws.plan?.steps.length;
  if (c === "preferences") return !!ws.preferences?.items.length;
  return ws.artifacts.length > 0;
}

/** Artifacts produced or changed in the workspace's turn. */
export const changedArtifacts = (ws: Workspace): Artifact[] => ws.artifacts.filter((a) => a.changed);

export async function loadWorkspace(instance: string, turnIndex?: number): Promise<Workspace> {
  return api().chat.getWorkspace({ name: `${instance}/workspace`, turnIndex });
}

export interface PanelsContext {
  instance: string;
  store: RatingStore;
  /** Open the feedback modal of `turnIndex` at the workspace (or artifacts) section. */
  openModal: (turnIndex: number, section: "workspace" | "artifacts", ws: Workspace) => void;
  /** A component rating was stored (the reply's glyph lights too). */
  onRated: (turnIndex: number) => void;
}

/** The panels' container. `show(turn, latest)` renders the workspace as of `turn`. */
export class WorkspacePanels {
  readonly el: HTMLElement;
  private body: HTMLElement;
  private heading: HTMLElement;
  private ws: Workspace | null = null;
  private latest = -1;
  /** `${turn}|${component key}` the owner opened (their ping is gone for that turn). */
  private opened = new Set<string>();

  constructor(private ctx: PanelsContext) {
    this.heading = h("span", { class: "ws-turn muted" });
    this.body = h("div", { class: "ws-body", id: `ws-body-${Math.random().toString(36).slice(2, 8)}` });
    const toggle = h("button", { type: "button", class: "ws-toggle", "aria-expanded": "true", "aria-controls": this.body.id }, "Hide");
    toggle.addEventListener("click", () => {
      const open = this.body.hidden;
      this.body.hidden = !open;
      toggle.setAttribute("aria-expanded", String(open));
      toggle.textContent = open ? "Hide" : "Show";
      this.el.classList.toggle("collapsed", !open);
    });
    this.el = h("aside", { class: "workspace", "aria-label": "Workspace" },
      h("header", { class: "ws-head" }, h("h2", {}, "Workspace"), this.heading, toggle), this.body);
  }

  /** Render the workspace as of `turn` (undefined: the latest); `latest` is the conversation's last turn. */
  async show(turn: number | undefined, latest: number): Promise<void> {
    this.latest = latest;
    try {
      this.ws = await loadWorkspace(this.ctx.instance, turn);
    } catch (e) {
      mount(this.body, h("p", { class: "error" }, errorText(e)));
      return;
    }
    this.render();
  }

  get workspace(): Workspace | null {
    return this.ws;
  }

  /** The owner opened component `key` of the viewed turn (its ping goes). */
  markOpened(turn: number, key: string): void {
    this.opened.add(`${turn}|${key}`);
    this.render();
  }

  render(): void {
    const ws = this.ws;
    if (!ws) return;
    const viewed = ws.turnIndex;
    const older = viewed >= 0 && viewed < this.latest;
    mount(this.heading, viewed < 0 ? "No turns yet" : `As of turn ${viewed + 1}`, older ? " (an earlier turn)" : null);
    this.el.dataset.turn = String(viewed);
    mount(this.body, (["objective", "plan", "artifacts", "preferences"] as Component[]).map((c) => this.panel(ws, c)));
  }

  private pinged(ws: Workspace, key: string, changed: boolean, rated: boolean): boolean {
    return changed && !rated && ws.turnIndex === this.latest && !this.opened.has(`${ws.turnIndex}|${key}`);
  }

  private panel(ws: Workspace, c: Component): HTMLElement {
    const changed = changedIn(ws, c);
    const title = h("button", { type: "button", class: "ws-title link" }, TITLES[c]);
    title.addEventListener("click", () => this.open(ws, c));
    const head = h("header", { class: "ws-panel-head" }, title);
    const section = h("section", { class: "ws-panel card", dataset: { component: c, changed: String(changed) } }, head);
    if (c !== "artifacts" && ws.snapshotTurnIndex >= 0) {
      const key: RatingKey = { turnIndex: ws.turnIndex, scope: SCOPE_OF[c], aspect: REACTION };
      head.append(this.glyph(ws, key, c, changed, existsIn(ws, c)));
    }
    section.append(this.content(ws, c));
    return section;
  }

  private open(ws: Workspace, c: Component | string): void {
    this.markOpened(ws.turnIndex, c);
    this.ctx.openModal(ws.turnIndex, c === "artifacts" || c.startsWith("artifact:") ? "artifacts" : "workspace", ws);
  }

  private content(ws: Workspace, c: Component): HTMLElement {
    if (c === "objective") {
      return ws.objective?.text ? h("p", { class: "ws-objective" }, ws.objective.text) : h("p", { class: "muted" }, "No objective yet.");
    }
    if (c === "plan") {
      const steps = ws.plan?.steps ?? [];
      return steps.length
        ? h("ol", { class: "ws-plan" }, steps.map((s) => h("li", { dataset: { state: STATE_LABEL[s.state] ?? "" } },
            h("span", { class: `badge step-${STATE_LABEL[s.state]?.replace(" ", "-") ?? "unknown"}` }, STATE_LABEL[s.state] ?? "?"), " ", s.text)))
        : h("p", { class: "muted" }, "No plan yet.");
    }
    if (c === "preferences") {
      const items = ws.preferences?.items ?? [];
      return items.length
        ? h("ul", { class: "ws-prefs" }, items.map((p) => h("li", {}, p.text, " ",
            h("span", { class: "badge" }, p.source === PreferenceSource.OWNER ? "you said" : "inferred"))))
        : h("p", { class: "muted" }, "No preferences yet.");
    }
    if (!ws.artifacts.length) return h("p", { class: "muted" }, "No artifacts yet.");
    return h("ul", { class: "ws-artifacts" }, ws.artifacts.map((a) => {
      const id = String(a.artifactId);
      const title = h("button", { type: "button", class: "ws-artifact-title link" }, a.title);
      title.addEventListener("click", () => this.open(ws, `artifact:${id}`));
      const key: RatingKey = { turnIndex: ws.turnIndex, scope: RatingScope.ARTIFACT, aspect: REACTION, artifactId: id };
      return h("li", { class: "ws-artifact", dataset: { artifact: id, changed: String(a.changed) } },
        h("div", { class: "ws-artifact-head" }, title, h("span", { class: "muted" }, ` v${a.version} · ${a.mediaType}`),
          this.glyph(ws, key, `artifact:${id}`, a.changed, true)),
        h("pre", { class: "ws-artifact-body" }, a.content.slice(0, 600)));
    }));
  }

  /** The like/dislike pair of one component (same look as a reply's) with its ping. */
  private glyph(ws: Workspace, key: RatingKey, pingKey: string, changed: boolean, enabled: boolean): HTMLElement {
    const any = this.ctx.store.forTurn(ws.turnIndex).filter((r) => r.scope === key.scope && (key.artifactId === undefined || r.artifactId === key.artifactId));
    const reaction = this.ctx.store.get(key);
    const lit = reaction?.sentiment === RatingSentiment.POSITIVE ? "like" : reaction?.sentiment === RatingSentiment.NEGATIVE ? "dislike"
      : any.length ? "feedback" : "none";
    const half = (which: "like" | "dislike", sentiment: RatingSentiment, label: string, sign: string) => {
      const b = h("button", { type: "button", class: `act half act-${which}`, title: label, "aria-label": label,
        "aria-pressed": String(lit === which), disabled: !enabled }, h("span", { "aria-hidden": "true" }, sign));
      b.addEventListener("click", () => void this.react(key, sentiment));
      return b;
    };
    const pair = h("span", { class: `glyph-pair lit-${lit}`, role: "group", "aria-label": "Like or dislike", dataset: { lit } },
      half("like", RatingSentiment.POSITIVE, "Like", "▲"), half("dislike", RatingSentiment.NEGATIVE, "Dislike", "▼"));
    const ping = this.pinged(ws, pingKey, changed, any.length > 0);
    return h("span", { class: "ws-glyph" }, pair,
      ping ? h("span", { class: "ping", role: "status", "aria-label": "Just updated" }, h("span", { class: "ping-dot", "aria-hidden": "true" }),
        h("span", { class: "ping-cloud" }, "Just updated")) : null);
  }

  private async react(key: RatingKey, sentiment: RatingSentiment): Promise<void> {
    try {
      if (this.ctx.store.get(key)?.sentiment === sentiment) await this.ctx.store.remove(key);
      else await this.ctx.store.put(key, { sentiment }, ["sentiment"]);
    } catch (e) {
      if (!(e instanceof StaleWrite)) {
        mount(this.heading, h("span", { class: "error" }, errorText(e)));
        return;
      }
      await this.ctx.store.put(key, { sentiment }, ["sentiment"]);
    }
    this.render();
    this.ctx.onRated(key.turnIndex);
  }
}
