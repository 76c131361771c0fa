// Suspected defects: the turns in which the platform caught its own agent misbehaving (a tool result
// cut, a result no tool returned, a failed tool call or turn; ChatService.ListSuspectedDefects), apart
// from what people said. The owner sees their agents' turns; an operator (feedback:admin) may list every
// owner's (`instances/-`). One action turns a defect into a report anchored to that turn
// (FeedbackService.ReportSuspectedDefect; the server writes the report's sentence). A defect already
// reported (a platform report on its turn, found with ListFeedback) shows its report, not the action —
// after a reload too; the server keeps one report per defect anyway. Every page of instances, defects
// and platform reports is read (each list stops at MAX_PAGES pages and says so).
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { api, errorText, lastSegment, principal, uuid4 } from "../api";
import { h, mount, timeEl } from "../dom";
import { DefectKind, type SuspectedDefect } from "../gen/agentfeedback/chat/v1/chat_pb";
import { Author } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { go } from "../router";
import { clamped } from "../components/evidence";
import { traceIdOf } from "../components/feedbackList";

const KIND_TEXT: Record<number, string> = {
  [DefectKind.TRUNCATED]: "a tool result was cut",
  [DefectKind.INVENTED_RESULT]: "the reply claimed a result no tool returned",
  [DefectKind.TOOL_ERROR]: "a tool call failed",
  [DefectKind.TURN_ERROR]: "the turn failed",
};

// Pages read per list (of up to 1000 rows each): past it the page says the list is cut.
const MAX_PAGES = 20;

/** Every page of a List call (AIP-158 tokens), MAX_PAGES at most; `cut` when more were left. */
async function allPages<T>(fetch: (pageToken: string) => Promise<{ items: T[]; nextPageToken: string }>): Promise<{ items: T[]; cut: boolean }> {
  const items: T[] = [];
  let pageToken = "";
  for (let page = 0; page < MAX_PAGES; page++) {
    const r = await fetch(pageToken);
    items.push(...r.items);
    pageToken = r.nextPageToken;
    if (!pageToken) return { items, cut: false };
  }
  return { items, cut: true };
}

function reportedNote(reportName: string): HTMLElement {
  return h("span", { class: "defect-msg", role: "status" }, "Reported. ",
    h("a", { href: `#/feedback?highlight=${encodeURIComponent(reportName)}` }, "See it on the Feedback page"), ".");
}

function instanceOf(d: SuspectedDefect): string {
  return d.name.split("/suspectedDefects/")[0];
}

function reportButton(d: SuspectedDefect, reported: string | undefined): HTMLElement {
  if (reported) return h("span", { class: "defect-actions" }, reportedNote(reported));
  const requestId = uuid4(); // a retry after a lost answer never files a second report
  const msg = h("span", { class: "defect-msg", role: "status" });
  const b = h("button", { type: "button", class: "act-report-defect" }, "Report it");
  b.addEventListener("click", async () => {
    b.disabled = true;
    msg.className = "defect-msg muted";
    msg.textContent = "Reporting…";
    try {
      const fb = await api().feedback.reportSuspectedDefect({ suspectedDefect: d.name, requestId });
      b.remove();
      msg.replaceWith(reportedNote(fb.name));
    } catch (e) {
      msg.className = "defect-msg error";
      msg.textContent = `${errorText(e)} — you can try again.`;
      b.disabled = false;
    }
  });
  return h("span", { class: "defect-actions" }, b, msg);
}

function defectRow(d: SuspectedDefect, names: Map<string, string>, everyOwner: boolean, reported: Map<string, string>): HTMLElement {
  const inst = instanceOf(d);
  const id = lastSegment(inst);
  return h("article", { class: "defect-row", dataset: { name: d.name, trace: d.traceId } },
    h("header", { class: "fb-head" },
      timeEl(d.time ? timestampDate(d.time) : undefined),
      h("span", { class: "fb-agent" }, names.get(inst) || id),
      everyOwner ? h("span", { class: "muted" }, d.owner) : null,
      h("code", { class: "defect-event" }, d.event),
      d.kinds.length > 1 ? h("span", { class: "badge" }, `${d.kinds.length} signals`) : null),
    h("p", { class: "defect-what" }, d.kinds.map((k) => KIND_TEXT[k] ?? DefectKind[k]).join("; "),
      d.tools.length ? h("span", { class: "muted" }, ` (${d.tools.join(", ")})`) : ""),
    h("blockquote", { class: "fb-quote" }, clamped("defect-user", 3, h("span", { class: "muted" }, `Turn ${d.turnIndex + 1}, you asked: `), d.userText,
      d.userTextClipped ? h("span", { class: "muted" }, " […]") : "")),
    h("p", { class: "fb-links" },
      h("a", { href: `#/agents/${encodeURIComponent(id)}/chat?trace=${d.traceId}`, class: "open-conversation" }, "open the conversation"), " · ",
      h("a", { href: `#/agents/${encodeURIComponent(id)}/trace?trace=${d.traceId}`, class: "open-trace" }, "open the trace")),
    everyOwner ? null : reportButton(d, reported.get(d.traceId)));
}

export async function defectsPage(main: HTMLElement, query: URLSearchParams): Promise<void> {
  const admin = principal()?.scopes.has("feedback:admin") ?? false;
  const everyOwner = admin && query.get("all") === "1";
  const toggle = admin
    ? h("label", {}, h("input", { type: "checkbox", id: "defects-all", checked: everyOwner,
        onchange: (ev: Event) => go((ev.target as HTMLInputElement).checked ? "#/defects?all=1" : "#/defects") }), " every owner (operator)")
    : null;
  const list = h("div", { class: "feedback-list", "aria-busy": "true" });
  const error = h("p", { class: "error", role: "alert" });
  mount(main, h("div", { class: "page-head" }, h("h1", {}, "Suspected defects"), toggle),
    h("p", { class: "muted" }, "Turns the platform flagged itself (not what anyone said). Reporting one files it under Feedback."), error, list);
  const names = new Map<string, string>();
  const reported = new Map<string, string>(); // trace id → the platform report on that turn
  const found: SuspectedDefect[] = [];
  let cut = false;
  try {
    const inst = await allPages(async (pageToken) => {
      const r = await api().chat.listInstances({ pageSize: 1000, pageToken });
      return { items: r.instances, nextPageToken: r.nextPageToken };
    });
    for (const i of inst.items) names.set(i.name, i.displayName);
    const parents = everyOwner ? ["instances/-"] : inst.items.map((i) => i.name);
    const [lists, platform] = await Promise.all([
      Promise.all(parents.map((parent) => allPages(async (pageToken) => {
        const r = await api().chat.listSuspectedDefects({ parent, pageSize: 1000, pageToken });
        return { items: r.suspectedDefects, nextPageToken: r.nextPageToken };
      }))),
      everyOwner ? Promise.resolve({ items: [], cut: false }) : allPages(async (pageToken) => {
        const r = await api().feedback.listFeedback({ author: Author.PLATFORM, pageSize: 1000, pageToken });
        return { items: r.feedback, nextPageToken: r.nextPageToken };
      }),
    ]);
    for (const l of lists) found.push(...l.items);
    for (const f of platform.items) {
      const trace = traceIdOf(f);
      if (trace && !reported.has(trace)) reported.set(trace, f.name);
    }
    cut = inst.cut || platform.cut || lists.some((l) => l.cut);
  } catch (e) {
    error.textContent = errorText(e);
  }
  if (cut) error.textContent = `Showing the first ${MAX_PAGES} pages of a list; narrow it on the Feedback page.`;
  found.sort((a, b) => Number((b.time?.seconds ?? 0n) - (a.time?.seconds ?? 0n)));
  mount(list, found.length ? found.map((d) => defectRow(d, names, everyOwner, reported)) : h("p", { class: "muted empty" }, "Nothing flagged by the platform."));
  list.removeAttribute("aria-busy");
}
