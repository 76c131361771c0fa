// One review-queue item — a report or a negative judgement (rating) — everything about its turn side by
// side: the owner's words, the conversation around the turn (the turn before, the turn, the turn after;
// the reported or judged message marked), the frozen evidence (a report's own; for a judgement, that of
// the turn's reports, found by the turn's trace id), the trace (TraceQueryService.GetTrace; honest when
// gone) and every judgement the owner gave on the turn (ListRatings). An agent-recorded report also links
// the turn in which the owner spoke the complaint (context_trace_id).
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { api, errorCode, errorText, lastSegment, Code } from "../api";
import { claimedByOther } from "../claims";
import { h, iso, mount, timeEl } from "../dom";
import { Role, type Message } from "../gen/agentfeedback/chat/v1/chat_pb";
import { Author, RatingOrigin, RatingSentiment, type Feedback, type Rating } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { agentName, aspectLabel, turnLabel } from "../names";
import { categoryLabel, labelOf } from "../taxonomy";
import { clamped, frozenToolCalls, traceUiLink, voiceProvenance } from "./evidence";
import { statusName } from "../names";
import { cutNotice, waterfall } from "../pages/trace";

export function traceIdOf(fb: Feedback): string {
  return fb.snapshot?.traceId || (fb.target.case === "traceId" ? fb.target.value : "");
}

export function turnIndexOf(fb: Feedback): number | null {
  return fb.snapshot && (fb.snapshot.targetRole || fb.snapshot.traceId) ? fb.snapshot.turnIndex : null;
}

/** The link to the turn in which the owner spoke an agent-recorded complaint (context_trace_id), or null. */
export function complaintTurnLink(fb: Feedback): HTMLElement | null {
  if (fb.author !== Author.AGENT || !fb.contextTraceId) return null;
  const inst = lastSegment(fb.instance);
  return h("span", { class: "complaint-turn" }, "Said in ",
    h("a", { href: `#/agents/${encodeURIComponent(inst)}/chat?trace=${fb.contextTraceId}`, class: "open-complaint-turn", dataset: { trace: fb.contextTraceId } },
      "the complaint turn"),
    " (", h("a", { href: `#/agents/${encodeURIComponent(inst)}/trace?trace=${fb.contextTraceId}`, class: "open-complaint-trace" }, "its trace"), ")");
}

/** "turn removed 2026-12-02 04:20:31" when the owner removed the report's turn (Clear chat, delete turn
 * or delete conversation: Feedback.turn_removed_time); the report and its frozen evidence stay. Else null. */
export function turnRemovedBadge(fb: Feedback): HTMLElement | null {
  if (!fb.turnRemovedTime) return null;
  return h("span", { class: "badge turn-removed", title: "The owner removed this turn: its messages are gone; the report and the evidence frozen with it are kept." },
    "turn removed ", timeEl(timestampDate(fb.turnRemovedTime)));
}

/** "claimed by alice (another session) until 21:04", or null when free or ours. */
export function claimBadge(fb: Feedback): HTMLElement | null {
  const c = claimedByOther(fb);
  if (!c) return null;
  const until = c.expireTime ? timestampDate(c.expireTime) : undefined;
  return h("span", { class: "badge claimed", title: `Claimed by ${c.claimant} (session ${c.session.slice(0, 8)})` },
    `claimed by ${c.claimant}`, until ? ` until ${until.toTimeString().slice(0, 5)}` : "");
}

/** The turn an item is about: its conversation, turn index (null: not a chat turn), the marked message. */
interface TurnRef { instance: string; turn: number | null; message: string }

function reportTurn(fb: Feedback): TurnRef {
  return { instance: fb.instance, turn: turnIndexOf(fb), message: fb.target.case === "message" ? fb.target.value : "" };
}

/** The conversation around the turn; resolves to the turn's own messages (for its trace id). */
async function conversation(el: HTMLElement, ref: TurnRef): Promise<Message[]> {
  const { instance, turn } = ref;
  if (!instance || turn === null) { mount(el, h("p", { class: "unavailable" }, "No conversation (not a chat turn).")); return []; }
  try {
    const turns = [turn - 1, turn, turn + 1].filter((t) => t >= 0);
    const pages = await Promise.all(turns.map((t) => api().chat.listMessages({ parent: instance, turnIndex: t, pageSize: 20 })));
    const msgs: Message[] = pages.flatMap((p) => p.messages);
    const target = ref.message;
    mount(el, msgs.length
      ? msgs.map((m) => h("article", { class: `qi-msg ${m.role === Role.ASSISTANT ? "assistant" : "user"}${m.name === target || (!target && m.turnIndex === turn) ? " reported" : ""}`,
          dataset: { turn: String(m.turnIndex), name: m.name } },
          h("div", { class: "msg-head" }, h("span", { class: "msg-role" }, m.role === Role.ASSISTANT ? "agent" : "owner"),
            h("span", { class: "qi-turn" }, turnLabel(m.turnIndex)), m.name === target ? h("span", { class: "badge" }, "reported") : null),
          clamped("qi-msg-body", 6, iso(m.content))))
      : h("p", { class: "unavailable" }, "Conversation unavailable (chat cleared or turn deleted)."));
    return msgs.filter((m) => m.turnIndex === turn);
  } catch (e) {
    mount(el, h("p", { class: "unavailable" }, errorCode(e) === Code.NotFound ? "Conversation unavailable (chat cleared or turn deleted)." : errorText(e)));
    return [];
  }
}

async function trace(el: HTMLElement, tid: string): Promise<void> {
  if (!tid) { mount(el, h("p", { class: "unavailable" }, "No trace (not a chat turn).")); return; }
  try {
    const t = await api().traces.getTrace({ traceId: tid });
    mount(el, cutNotice(t), waterfall(t.spans));
  } catch (e) {
    mount(el, h("p", { class: "unavailable" }, errorCode(e) === Code.NotFound
      ? "The collector no longer has this turn's spans; the frozen copy is under Evidence."
      : errorCode(e) === Code.PermissionDenied ? "Spans need traces:read; the frozen copy is under Evidence." : errorText(e)));
  }
}

async function judgements(el: HTMLElement, ref: TurnRef): Promise<void> {
  const { instance, turn } = ref;
  if (!instance || turn === null) { mount(el, h("p", { class: "muted" }, "No turn to judge.")); return; }
  try {
    const r = await api().feedback.listRatings({ conversation: instance, turnIndex: turn, pageSize: 100 });
    mount(el, r.ratings.length
      ? h("ul", { class: "qi-ratings" }, r.ratings.map((x) => h("li", { class: "qi-rating", dataset: { aspect: x.aspect } },
          h("strong", {}, aspectLabel(x.aspect)), " ",
          h("span", { class: `badge sent-${(RatingSentiment[x.sentiment] ?? "").toLowerCase()}` }, (RatingSentiment[x.sentiment] ?? "").toLowerCase()),
          x.choice ? h("span", { class: "badge" }, labelOf(x.choice)) : null,
          x.origin === RatingOrigin.BRANCH_COPY ? h("span", { class: "badge copy" }, "branch copy") : null,
          x.reasons.length ? h("div", { class: "feed-reasons" }, x.reasons.map((s) => h("span", { class: "badge reason-badge" }, labelOf(s)))) : null,
          x.note ? clamped("qi-note", 3, x.note) : null)))
      : h("p", { class: "muted" }, "No judgements on this turn."));
  } catch (e) {
    mount(el, h("p", { class: "error" }, errorText(e)));
  }
}

/** Above the conversation of a report whose turn was removed: why its messages are missing. */
function removedNote(fb: Feedback): HTMLElement | null {
  if (!fb.turnRemovedTime) return null;
  return h("p", { class: "qi-removed-note" }, "The turn was removed ", timeEl(timestampDate(fb.turnRemovedTime)),
    ": its messages are gone from the conversation. The evidence beside was frozen with the report and stays.");
}

/** The item view's body (everything but the action bar). */
export function queueItemView(fb: Feedback): HTMLElement {
  const turn = turnIndexOf(fb);
  const conv = h("div", { class: "qi-conv" }, h("p", { class: "muted" }, "Loading…"));
  const tr = h("div", { class: "qi-trace" }, h("p", { class: "muted" }, "Loading…"));
  const judged = h("div", { class: "qi-judgements" }, h("p", { class: "muted" }, "Loading…"));
  const ref = reportTurn(fb);
  void conversation(conv, ref);
  void trace(tr, traceIdOf(fb));
  void judgements(judged, ref);
  const tools = frozenToolCalls(fb);
  tools?.setAttribute("open", "");
  return h("article", { class: "queue-item", dataset: { name: fb.name } },
    h("header", { class: "fb-head" },
      timeEl(fb.createTime ? timestampDate(fb.createTime) : undefined),
      h("span", { class: "fb-agent" }, agentName(fb.instance)),
      turn !== null ? h("span", { class: "qi-turn" }, turnLabel(turn)) : null,
      h("span", { class: `badge status-${statusName(fb.status)}` }, statusName(fb.status)),
      fb.category ? h("span", { class: "badge fb-category" }, categoryLabel(fb.category)) : null,
      fb.author === Author.AGENT ? h("span", { class: "badge" }, "recorded by the agent") : null,
      fb.author === Author.PLATFORM ? h("span", { class: "badge" }, "caught by the platform") : null,
      turnRemovedBadge(fb),
      claimBadge(fb)),
    h("p", { class: "qi-words" }, fb.body),
    complaintTurnLink(fb),
    fb.issueUrl ? h("p", {}, "Issue: ", h("a", { href: fb.issueUrl, rel: "noopener noreferrer", target: "_blank", class: "issue-link" }, fb.issueUrl)) : null,
    h("div", { class: "qi-grid" },
      h("section", { class: "qi-panel" }, h("h3", {}, "Conversation around the turn"), removedNote(fb), conv),
      h("section", { class: "qi-panel" }, h("h3", {}, "Evidence (frozen with the report)"),
        voiceProvenance(fb), tools ?? h("p", { class: "muted" }, "No tool calls were frozen.")),
      h("section", { class: "qi-panel" }, h("h3", {}, "Trace"), traceUiLink(fb), tr),
      h("section", { class: "qi-panel" }, h("h3", {}, `Judgements on ${turn !== null ? turnLabel(turn).toLowerCase() : "the turn"}`), judged)));
}

/** The frozen evidence of the turn's reports (a judgement freezes none of its own). */
async function turnEvidence(el: HTMLElement, instance: string, traceId: string): Promise<void> {
  if (!traceId) { mount(el, h("p", { class: "muted" }, "No trace id for this turn, so no report to take evidence from.")); return; }
  try {
    const r = await api().feedback.listFeedback({ instance, traceId, pageSize: 20 });
    const tools = r.feedback.map((fb) => frozenToolCalls(fb)).find((x) => x !== null) ?? null;
    tools?.setAttribute("open", "");
    mount(el, r.feedback.length
      ? [h("p", { class: "muted qi-turn-reports" }, `Frozen with ${r.feedback.length === 1 ? "the report" : `${r.feedback.length} reports`} on this turn.`),
          tools ?? h("p", { class: "muted" }, "No tool calls were frozen.")]
      : h("p", { class: "muted qi-no-report" }, "No report on this turn froze its evidence; the live trace is beside."));
  } catch (e) {
    mount(el, h("p", { class: "error" }, errorText(e)));
  }
}

/** A negative judgement's item view: what the owner said (sentiment, answer, reasons, note) and the turn. */
export function judgementItemView(r: Rating): HTMLElement {
  const ref: TurnRef = { instance: r.conversation, turn: r.turnIndex, message: r.message };
  const conv = h("div", { class: "qi-conv" }, h("p", { class: "muted" }, "Loading…"));
  const tr = h("div", { class: "qi-trace" }, h("p", { class: "muted" }, "Loading…"));
  const evidence = h("div", { class: "qi-evidence" }, h("p", { class: "muted" }, "Loading…"));
  const judged = h("div", { class: "qi-judgements" }, h("p", { class: "muted" }, "Loading…"));
  void conversation(conv, ref).then((turnMsgs) => {
    const tid = turnMsgs.find((m) => m.traceId)?.traceId ?? "";
    void trace(tr, tid);
    void turnEvidence(evidence, r.conversation, tid);
  });
  void judgements(judged, ref);
  return h("article", { class: "queue-item judgement-item", dataset: { name: r.name } },
    h("header", { class: "fb-head" },
      timeEl(r.updateTime ? timestampDate(r.updateTime) : undefined),
      h("span", { class: "fb-agent" }, agentName(r.conversation)),
      h("span", { class: "qi-turn" }, turnLabel(r.turnIndex)),
      h("span", { class: "badge judgement-kind" }, "judgement"),
      h("span", { class: `badge sent-${(RatingSentiment[r.sentiment] ?? "").toLowerCase()}` }, (RatingSentiment[r.sentiment] ?? "").toLowerCase())),
    h("p", { class: "qi-words" }, h("strong", {}, aspectLabel(r.aspect)), r.choice ? `: ${labelOf(r.choice)}` : ""),
    r.reasons.length ? h("div", { class: "feed-reasons qi-reasons" }, r.reasons.map((s) => h("span", { class: "badge reason-badge" }, labelOf(s)))) : null,
    r.note ? clamped("qi-note", 6, r.note) : null,
    h("div", { class: "qi-grid" },
      h("section", { class: "qi-panel" }, h("h3", {}, "Conversation around the turn"), conv),
      h("section", { class: "qi-panel" }, h("h3", {}, "Evidence (frozen by the turn's reports)"), evidence),
      h("section", { class: "qi-panel" }, h("h3", {}, "Trace"), tr),
      h("section", { class: "qi-panel" }, h("h3", {}, `Judgements on ${turnLabel(r.turnIndex).toLowerCase()}`), judged)));
}
