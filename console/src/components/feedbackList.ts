// Feedback rows, shared by the account-wide Feedback page and an agent's Feedback tab.
// Each row: time, agent, the owner's words, the quoted target, status, "open the conversation"
// (unavailable when the chat was cleared or the turn deleted), "open the trace" (honest about
// expired / not recorded spans), voice provenance and the frozen tool calls (evidence.ts), delete and
// "File issue" (rowActions.ts), and triage (status + issue URL, UpdateFeedback with the etag).
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { api, Code, errorCode, errorText, lastSegment, principal, uuid4 } from "../api";
import { append, h, iso, mount, timeEl } from "../dom";
import { Author, SnapshotSource, Status, TraceSnapshotState, type Feedback } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { categoryLabel } from "../taxonomy";
import { agentName, loadAgentNames, STATUS_NAMES, statusName, turnLabel } from "../names";
import { claimBadge, complaintTurnLink, turnIndexOf, turnRemovedBadge } from "./queueItem";
import { clamped, frozenToolCalls, traceUiLink, voiceProvenance } from "./evidence";
import { deleteControl, fileControl, historyControl } from "./rowActions";

/** Lines of a quoted reply shown before "Show all" (a 2,000-character reply must not fill the screen). */
const QUOTE_LINES = 4;

export interface ListOptions {
  instance?: string;
  status?: Status;
  highlight?: string;
}

/** Fill `container` with the caller's feedback (newest first), paged with "Load more". */
export async function feedbackList(container: HTMLElement, opts: ListOptions): Promise<void> {
  const list = h("div", { class: "feedback-list", "aria-busy": "true" });
  const error = h("p", { class: "error", role: "alert" });
  const more = h("button", { type: "button", hidden: true }, "Load more");
  mount(container, list, error, more);
  let pageToken = "";
  await loadAgentNames();
  const load = async () => {
    try {
      const r = await api().feedback.listFeedback({ pageSize: 50, pageToken, instance: opts.instance ?? "", status: opts.status ?? Status.UNSPECIFIED });
      if (!pageToken && !r.feedback.length) list.append(h("p", { class: "muted empty" }, "Nothing flagged yet."));
      for (const fb of r.feedback) list.append(feedbackRow(fb, opts.highlight === fb.name));
      pageToken = r.nextPageToken;
      more.hidden = !pageToken;
    } catch (e) {
      error.textContent = errorText(e);
    } finally {
      list.removeAttribute("aria-busy");
    }
  };
  more.addEventListener("click", () => void load());
  await load();
  container.querySelector(".feedback-row.focused")?.scrollIntoView({ block: "center" });
}

/** The agent a report is about: its display name ("Ops desk"), else its instance id; the slug
 *  (`reference`) in parentheses; id and slug in the tooltip. */
function agentLabel(fb: Feedback): HTMLElement {
  const ctxAgent = fb.snapshot?.context?.agent ?? "";
  const inst = fb.instance ? lastSegment(fb.instance) : "";
  const name = fb.instance ? agentName(fb.instance) : "";
  const text = name && ctxAgent ? `${name} (${ctxAgent})` : name || ctxAgent || "—";
  return h("span", { class: "fb-agent", title: [inst, ctxAgent].filter(Boolean).join(" · ") }, text);
}

export function traceIdOf(fb: Feedback): string {
  return fb.snapshot?.traceId || (fb.target.case === "traceId" ? fb.target.value : "");
}

/** "open the trace", or an honest statement of why there is none. */
function traceLink(fb: Feedback): HTMLElement {
  const tid = traceIdOf(fb);
  const state = fb.traceSnapshot?.state ?? TraceSnapshotState.UNSPECIFIED;
  if (!tid) return h("span", { class: "unavailable trace-state" }, "no trace (not a chat turn)");
  const href = `#/agents/${encodeURIComponent(lastSegment(fb.instance) || "_")}/trace?trace=${tid}&feedback=${encodeURIComponent(fb.name)}`;
  switch (state) {
    case TraceSnapshotState.EXPIRED:
      return h("span", { class: "trace-state" }, h("span", { class: "unavailable" }, "trace expired"), " · ", h("a", { href, class: "open-trace" }, "frozen copy"));
    case TraceSnapshotState.UNAVAILABLE:
      return h("span", { class: "unavailable trace-state" }, "trace not recorded");
    case TraceSnapshotState.PENDING:
      return h("span", { class: "trace-state" }, h("a", { href, class: "open-trace" }, "open the trace"), h("span", { class: "muted" }, " (spans still arriving)"));
    default:
      return h("a", { href, class: "open-trace trace-state" }, "open the trace");
  }
}

/** "open the conversation" once the target message is known to still exist. */
function conversationLink(fb: Feedback): HTMLElement {
  const slot = h("span", { class: "conv-link muted" }, "checking conversation…");
  const inst = fb.instance ? lastSegment(fb.instance) : "";
  if (!inst) {
    slot.textContent = "no conversation (not a chat turn)";
    slot.className = "conv-link unavailable";
    return slot;
  }
  if (fb.turnRemovedTime) { // gone for good: no need to ask the chat service
    slot.textContent = "conversation unavailable (the turn was removed; the evidence here was frozen)";
    slot.className = "conv-link unavailable";
    return slot;
  }
  const href = fb.target.case === "message"
    ? `#/agents/${encodeURIComponent(inst)}/chat?message=${encodeURIComponent(fb.target.value)}`
    : `#/agents/${encodeURIComponent(inst)}/chat?trace=${traceIdOf(fb)}`;
  const check = fb.target.case === "message"
    ? api().chat.getMessage({ name: fb.target.value }).then(() => true)
    : api().chat.listMessages({ parent: fb.instance, traceId: traceIdOf(fb), pageSize: 1 }).then((r) => r.messages.length > 0);
  check
    .then((exists) => {
      slot.replaceChildren(
        exists
          ? h("a", { href, class: "open-conversation" }, "open the conversation")
          : h("span", { class: "unavailable" }, "conversation unavailable (chat cleared or turn deleted)"),
      );
      slot.className = "conv-link";
    })
    .catch((e) => {
      slot.className = "conv-link unavailable";
      slot.textContent = errorCode(e) === Code.NotFound ? "conversation unavailable (chat cleared or turn deleted)" : `conversation: ${errorText(e)}`;
    });
  return slot;
}

function triage(fb: Feedback, row: HTMLElement): HTMLElement | null {
  if (!principal()?.scopes.has("feedback:triage")) return null;
  const status = h("select", { "aria-label": "Status", class: "triage-status" },
    STATUS_NAMES.map(([v, n]) => h("option", { value: String(v), selected: v === fb.status }, n)));
  const issue = h("input", { type: "url", class: "triage-issue", placeholder: "https://tracker/issue/123", value: fb.issueUrl, "aria-label": "Issue URL" });
  const msg = h("span", { class: "triage-msg", role: "status" });
  return h(
    "form",
    {
      class: "triage",
      onsubmit: async (ev: Event) => {
        ev.preventDefault();
        try {
          const updated = await api().feedback.updateFeedback({
            feedback: { name: fb.name, status: Number(status.value) as Status, issueUrl: issue.value.trim(), etag: fb.etag },
            updateMask: { paths: ["status", "issue_url"] },
            requestId: uuid4(),
          });
          row.replaceWith(feedbackRow(updated, true));
        } catch (e) {
          if (errorCode(e) === Code.Aborted) {
            const current = await api().feedback.getFeedback({ name: fb.name });
            const fresh = feedbackRow(current, true);
            fresh.querySelector(".triage-msg")!.textContent = "Someone changed this report meanwhile: this is the current version; apply your change again.";
            row.replaceWith(fresh);
          } else {
            msg.textContent = errorText(e);
          }
        }
      },
    },
    status,
    issue,
    h("button", { type: "submit" }, "Save"),
    msg,
  );
}

/** A row whose quote came from the browser (the chat service was unreachable when it was sent):
 *  "quote not checked yet" until the chat service confirms it (then the stored message replaces it),
 *  "quote not confirmed" when the chat service found no such message for this owner. */
function quoteBadge(fb: Feedback): HTMLElement | null {
  if (fb.snapshot?.unverified) {
    return h("span", { class: "badge unverified", title: "The chat service has no such message for you: the quote is the browser's copy and the turn's tool calls were not captured." }, "quote not confirmed");
  }
  if (fb.snapshot?.source === SnapshotSource.CLIENT) {
    return h("span", { class: "badge unverified", title: "Sent while the chat service was unreachable: the quote is the browser's copy until the stored message replaces it." }, "quote not checked yet");
  }
  return null;
}

export function feedbackRow(fb: Feedback, focused = false): HTMLElement {
  const row = h("article", { class: `feedback-row${focused ? " focused" : ""}`, dataset: { name: fb.name, trace: traceIdOf(fb) } });
  const target = fb.snapshot?.targetText ?? "";
  const role = fb.snapshot?.targetRole === "ROLE_USER" ? "your message" : "the agent's reply";
  append(row, [
    h("header", { class: "fb-head" },
      timeEl(fb.createTime ? timestampDate(fb.createTime) : undefined),
      agentLabel(fb),
      turnIndexOf(fb) !== null ? h("span", { class: "fb-turn" }, turnLabel(turnIndexOf(fb)!)) : null,
      h("span", { class: `badge status-${statusName(fb.status)}` }, statusName(fb.status)),
      fb.category ? h("span", { class: "badge fb-category" }, categoryLabel(fb.category)) : null,
      turnRemovedBadge(fb),
      claimBadge(fb),
      fb.author === Author.AGENT ? h("span", { class: "badge" }, "recorded by the agent") : null,
      fb.author === Author.PLATFORM ? h("span", { class: "badge" }, "caught by the platform") : null,
      quoteBadge(fb),
    ),
    clamped("fb-words-box", 6, iso(fb.body, { class: "fb-words" })),
    complaintTurnLink(fb),
    target
      ? h("blockquote", { class: "fb-quote", cite: fb.target.case === "message" ? fb.target.value : undefined },
          clamped("fb-quote-text", QUOTE_LINES, h("span", { class: "muted" }, `On ${role}: `), iso(target),
            fb.snapshot?.targetTextClipped ? h("span", { class: "muted" }, " […]") : ""))
      : null,
    voiceProvenance(fb),
    frozenToolCalls(fb),
    fb.issueUrl ? h("p", { class: "fb-issue" }, "Issue: ", h("a", { href: fb.issueUrl, rel: "noopener noreferrer", target: "_blank" }, fb.issueUrl)) : null,
    h("p", { class: "fb-links" }, conversationLink(fb), " · ", traceLink(fb), traceUiLink(fb) ? [" · ", traceUiLink(fb)] : null),
    h("div", { class: "fb-actions" },
      fileControl(fb, (filed) => row.replaceWith(feedbackRow(filed, true))),
      deleteControl(fb, row),
      historyControl(fb)),
  ]);
  const t = triage(fb, row);
  if (t) row.append(t);
  return row;
}
