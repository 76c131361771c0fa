// The modal's controls. Each owns one field of one rating (a choice also sends the sentiment the
// taxonomy maps it to, so the answer aggregates) and saves it alone through RatingStore.put with an
// update mask; a stale write shows the current value and offers to apply the owner's change again.
import { errorText } from "../api";
import { h, mount } from "../dom";
import type { Rating } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { RatingStore, StaleWrite, type RatingKey, type RatingPatch } from "../ratings";
import { labelOf, scopeOf, sentimentOf, type Question } from "../taxonomy";

/** What a control needs: the store, the turn, and a hook run after every successful save. */
export interface ControlContext {
  store: RatingStore;
  turnIndex: number;
  artifactId?: string;
  onSaved: () => void;
}

let seq = 0;

export function keyFor(q: Question, ctx: ControlContext): RatingKey {
  return { turnIndex: ctx.turnIndex, scope: scopeOf(q), aspect: q.aspect, artifactId: ctx.artifactId };
}

/** The current value of one field, as text for the stale-write message. */
function describe(r: Rating | undefined, path: string): string {
  if (!r) return "nothing (the rating was removed)";
  if (path === "choice") return r.choice ? labelOf(r.choice) : "no answer";
  if (path === "reasons") return r.reasons.length ? r.reasons.map(labelOf).join(", ") : "no reasons";
  if (path === "note") return r.note ? `“${r.note.slice(0, 80)}${r.note.length > 80 ? "…" : ""}”` : "no note";
  return String(r[path as keyof Rating] ?? "");
}

/** Save `patch` on `paths`; the status line says Saved / the error / the stale value with a retry. */
async function save(ctx: ControlContext, q: Question, patch: RatingPatch, paths: string[], status: HTMLElement,
                    refresh: () => void): Promise<void> {
  status.className = "ctl-status muted";
  status.textContent = "Saving…";
  try {
    await ctx.store.put(keyFor(q, ctx), patch, paths);
    status.textContent = "Saved.";
    refresh();
    ctx.onSaved();
  } catch (e) {
    if (e instanceof StaleWrite) {
      refresh(); // show what is stored now
      const retry = h("button", { type: "button", class: "retry-stale" }, "Apply my change again");
      retry.addEventListener("click", () => void save(ctx, q, patch, paths, status, refresh));
      status.className = "ctl-status stale";
      mount(status, `Changed meanwhile (another tab or device): it is now ${describe(e.current, paths[0])}. `, retry);
    } else {
      status.className = "ctl-status error";
      status.textContent = errorText(e);
    }
  }
}

function copyBadge(r: Rating | undefined): HTMLElement | null {
  return RatingStore.isCopy(r)
    ? h("span", { class: "badge copy", title: "Copied from the conversation this one was branched from; editing it makes it yours." }, "copy")
    : null;
}

/** A choice question (radio group, 44 px labels) with, when `withReasons`, the reasons of the picked
 *  choice (checkboxes, owning `reasons`) and, when `withNote`, a note (owning `note`). */
export function choiceQuestion(q: Question, ctx: ControlContext, opts: { withReasons?: boolean; withNote?: boolean } = {}): HTMLElement {
  const box = h("fieldset", { class: "question", dataset: { aspect: q.aspect } });
  // Status lines outlive re-renders (a save re-renders the question to show what is stored).
  const status = (field: string) => h("p", { class: "ctl-status", role: "status", dataset: { field } });
  const choiceStatus = status("choice"), reasonStatus = status("reasons"), noteStatus = status("note");
  const render = () => {
    const r = ctx.store.get(keyFor(q, ctx));
    const group = `q${++seq}`;
    const choices = h("div", { class: "choices" }, q.choices.map((c) => {
      const input = h("input", { type: "radio", name: group, value: c.slug, checked: r?.choice === c.slug });
      input.addEventListener("change", () =>
        void save(ctx, q, { choice: c.slug, sentiment: sentimentOf(c.sentiment) }, ["choice", "sentiment"], choiceStatus, renderLater));
      return h("label", { class: "choice", dataset: { choice: c.slug } }, input, h("span", {}, c.label));
    }));
    const parts: (HTMLElement | null)[] = [h("legend", {}, q.label, " ", copyBadge(r)), choices, choiceStatus];
    const picked = q.choices.find((c) => c.slug === r?.choice);
    if (opts.withReasons && picked?.reasons.length) {
      const have = new Set(r?.reasons ?? []);
      const inputs = picked.reasons.map((rs) => {
        const cb = h("input", { type: "checkbox", value: rs.slug, checked: have.has(rs.slug) });
        return { rs, cb };
      });
      const onChange = () => {
        const reasons = inputs.filter((x) => x.cb.checked).map((x) => x.rs.slug).sort();
        void save(ctx, q, { reasons }, ["reasons"], reasonStatus, renderLater);
      };
      inputs.forEach((x) => x.cb.addEventListener("change", onChange));
      parts.push(h("div", { class: "reasons", role: "group", "aria-label": "Why?" },
        h("span", { class: "muted reasons-title" }, "Why? (any that apply)"),
        inputs.map(({ rs, cb }) => h("label", { class: "reason", dataset: { reason: rs.slug } }, cb, h("span", {}, rs.label)))), reasonStatus);
    }
    if (picked?.note_prompt && r) parts.push(noteControl(q, ctx, r, noteStatus, renderLater, picked.note_prompt));
    else if (opts.withNote && r) parts.push(noteControl(q, ctx, r, noteStatus, renderLater));
    mount(box, parts);
  };
  // Re-render after the current event (a radio's change handler must finish before its DOM goes).
  const renderLater = () => queueMicrotask(render);
  render();
  return box;
}

/** The rating's note; with `prompt` (a choice's `note_prompt`, e.g. rejecting the objective) a box asking
 *  for the owner's own words, stored as the note. */
function noteControl(q: Question, ctx: ControlContext, r: Rating, status: HTMLElement, refresh: () => void,
                     prompt?: string): HTMLElement {
  const note = h("textarea", { rows: prompt ? 3 : 2, class: prompt ? "note emerging-goal-text" : "note",
    "aria-label": prompt ?? `A note (${q.label})`, placeholder: prompt ?? "Anything to add? (optional)" }, r.note);
  const saveBtn = h("button", { type: "button", class: "save-note" }, prompt ? "Save" : "Save note");
  saveBtn.addEventListener("click", () => void save(ctx, q, { note: note.value }, ["note"], status, refresh));
  return h("div", { class: prompt ? "note-box emerging-goal" : "note-box" }, prompt ? h("p", { class: "emerging-goal-prompt" }, prompt) : null, note,
    h("div", { class: "row-end" }, saveBtn), status);
}
