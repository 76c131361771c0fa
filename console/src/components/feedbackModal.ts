// The feedback modal of one turn: a <dialog> with four sections, each question shown only when it
// applies (questions and vocabulary from taxonomy.json):
//   reply       this reply: the judgement (Worked well / Mixed / Didn't work), its reasons, a note
//   trajectory  the whole trajectory: task completion (4 states), objective endorsement, goal evolution
//               and ownership (from `min_turns` turns on), the overall assessment (reason + note), and
//               the branch question on a forked conversation
//   report      a technical issue: one of the six categories + a description (CreateFeedback)
//   workspace   the objective, plan and preferences as of the turn (workspaceQuestions.ts), each marked
//               "Just updated" when the turn changed it; delta questions only then
//   artifacts   one card per artifact the turn produced or changed, else the live document (artifact_id 0)
// The header quotes the message (role, time, first line) so the owner sees what they are judging.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { api, Code, errorCode, errorText, uuid4 } from "../api";
import { h, mount, timeEl } from "../dom";
import type { Message, Workspace } from "../gen/agentfeedback/chat/v1/chat_pb";
import { Sentiment, Surface } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import type { RatingStore } from "../ratings";
import { categoryOf, REPLY_QUESTIONS, TAXONOMY, TRAJECTORY_QUESTIONS, type Question } from "../taxonomy";
import { choiceQuestion, type ControlContext } from "./feedbackControls";
import { artifactCards, workspaceSection } from "./workspaceQuestions";

export type Section = "reply" | "trajectory" | "report" | "workspace" | "artifacts";
// Each tab's label, and the short one a phone shows (the row scrolls sideways when it still does not fit).
const SECTIONS: [Section, string, string][] = [["reply", "This reply", "Reply"], ["trajectory", "Whole trajectory", "Task"],
  ["report", "Report an issue", "Report"], ["workspace", "Workspace", "Workspace"], ["artifacts", "Artifacts", "Artifacts"]];
/** The feedback service's limit (feedback.proto: body ≤ 4000 characters); shown, never enforced by clipping. */
const BODY_LIMIT = 4000;

export interface TurnContext {
  instance: string;
  message: Message; // the assistant reply of the turn (or the user message when there is none)
  turns: number; // turns in the conversation so far
  forked: boolean; // this conversation is a branch of another
  artifacts: string[]; // unused when `workspace` is given (its artifacts produced or changed in the turn are)
  workspace?: Workspace | null; // the workspace as of the turn (ChatService.GetWorkspace)
  paths?: boolean; // the conversation has more than one path (it is a fork, or was forked)
  store: RatingStore;
  onChange: () => void; // a rating or report was stored
  onReported: (feedbackName: string) => void;
}

function applies(q: Question, t: TurnContext): boolean {
  if (q.min_turns && t.turns < q.min_turns) return false;
  if (q.when === "forked" && !t.forked) return false;
  if (q.when === "paths" && !(t.paths || t.forked)) return false;
  return true;
}

function replySection(ctx: ControlContext): HTMLElement {
  return h("div", {}, REPLY_QUESTIONS.map((q) => choiceQuestion(q, ctx, { withReasons: true, withNote: true })));
}

function trajectorySection(t: TurnContext, ctx: ControlContext): HTMLElement {
  const qs = TRAJECTORY_QUESTIONS.filter((q) => applies(q, t));
  return h("div", {},
    h("p", { class: "muted" }, `About the whole conversation up to this turn (${t.turns} turn${t.turns === 1 ? "" : "s"}).`),
    qs.map((q) => choiceQuestion(q, ctx, { withReasons: q.choices.some((c) => c.reasons.length), withNote: q.aspect === "overall" })));
}

function artifactSection(t: TurnContext, ctx: ControlContext): HTMLElement {
  return artifactCards(t.workspace, ctx);
}

function reportSection(t: TurnContext, close: () => void): HTMLElement {
  // One request id per open composer: a retry of the same report never stores a second row (AIP-155).
  const requestId = uuid4();
  const group = `cat-${uuid4().slice(0, 8)}`;
  const cats = h("fieldset", { class: "question categories" }, h("legend", {}, "What kind of problem?"),
    h("div", { class: "choices" }, TAXONOMY.report_categories.map((c) =>
      h("label", { class: "choice", dataset: { category: c.category } },
        h("input", { type: "radio", name: group, value: c.category }), h("span", {}, c.label)))));
  const words = h("textarea", { rows: 3, class: "report-text", "aria-label": "What went wrong?", placeholder: "What went wrong? Your words are kept exactly as written." });
  const count = h("span", { class: "muted count" }, `0 / ${BODY_LIMIT}`);
  const error = h("p", { class: "error", role: "alert" });
  const submit = h("button", { type: "submit", class: "primary" }, "Send report");
  words.addEventListener("input", () => {
    // The server counts Unicode code points (Python len), not UTF-16 code units: one emoji is 1, not 2.
    const chars = [...words.value].length;
    count.textContent = `${chars} / ${BODY_LIMIT}`;
    count.classList.toggle("over", chars > BODY_LIMIT);
  });
  return h("form", {
    class: "report",
    onsubmit: async (ev: Event) => {
      ev.preventDefault();
      const picked = cats.querySelector<HTMLInputElement>("input:checked")?.value;
      if (!picked) { error.textContent = "Pick the kind of problem first."; return; }
      if (!words.value.trim()) { error.textContent = "Say what went wrong first."; return; }
      submit.disabled = true;
      try {
        const fb = await api().feedback.createFeedback({
          feedback: { target: { case: "message", value: t.message.name }, body: words.value, surface: Surface.CHAT,
            sentiment: Sentiment.BAD, category: categoryOf(picked) },
          requestId,
        });
        close();
        t.onReported(fb.name);
      } catch (e) {
        error.textContent = errorCode(e) === Code.InvalidArgument ? `Not sent. ${errorText(e)}` : errorText(e);
      } finally {
        submit.disabled = false;
      }
    },
  },
  h("p", { class: "muted" }, "A technical problem (content judgements go under “This reply”)."),
  cats, words, h("div", { class: "report-row" }, count, submit), error);
}

/** Open the modal for turn `t` at `section`; nothing in it blocks the conversation once closed. */
export function openFeedbackModal(t: TurnContext, section: Section): HTMLDialogElement {
  document.querySelector("dialog.fb-modal")?.remove();
  const dialog = h("dialog", { class: "fb-modal", "aria-label": "Feedback on this turn" });
  const close = () => { dialog.close(); dialog.remove(); };
  const ctx: ControlContext = { store: t.store, turnIndex: t.message.turnIndex, onSaved: t.onChange };
  const m = t.message;
  const firstLine = m.content.split("\n")[0].slice(0, 140);
  const header = h("header", { class: "modal-head" },
    h("div", { class: "modal-msg" },
      h("div", { class: "msg-head" }, h("span", { class: "msg-role" }, "agent"),
        h("span", { class: "msg-time" }, timeEl(m.createTime ? timestampDate(m.createTime) : undefined))),
      h("p", { class: "modal-quote" }, firstLine)),
    h("button", { type: "button", class: "modal-close", "aria-label": "Close" }, "Close"));
  header.querySelector(".modal-close")!.addEventListener("click", close);
  const tabs = h("div", { class: "tabs modal-tabs", role: "tablist", "aria-label": "Feedback sections" });
  const panel = h("div", { class: "modal-panel", role: "tabpanel" });
  const show = (s: Section) => {
    for (const b of tabs.querySelectorAll<HTMLButtonElement>("[role=tab]")) {
      const on = b.dataset.section === s;
      b.setAttribute("aria-selected", String(on));
      b.classList.toggle("active", on);
    }
    panel.dataset.section = s;
    mount(panel, s === "reply" ? replySection(ctx) : s === "trajectory" ? trajectorySection(t, ctx)
      : s === "report" ? reportSection(t, close) : s === "workspace" ? workspaceSection(t.workspace, ctx) : artifactSection(t, ctx));
  };
  mount(tabs, SECTIONS.map(([s, label, short]) => {
    const b = h("button", { type: "button", role: "tab", class: "tab", "aria-label": label, dataset: { section: s } },
      h("span", { class: "tab-long" }, label), h("span", { class: "tab-short", "aria-hidden": "true" }, short));
    b.addEventListener("click", () => { show(s); b.scrollIntoView({ block: "nearest", inline: "nearest" }); });
    return b;
  }));
  dialog.append(header, tabs, panel);
  dialog.addEventListener("close", () => dialog.remove());
  document.body.append(dialog);
  show(section);
  dialog.showModal();
  panel.querySelector<HTMLElement>("input, textarea")?.focus({ preventScroll: true });
  return dialog;
}
