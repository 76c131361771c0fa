// The account-wide Feedback page (#/feedback): every report of the caller as a table. Every filter
// ListFeedback offers is a control here and is applied by the server (agent, status, author kind,
// sentiment, category, time range, text, one turn's trace id); the filters live in the URL. The table is
// dataTable.ts: the API's page tokens, columns sorting the page on screen (the server's order is newest
// first), a row expanding to the whole report: evidence, links, triage, file, delete, history
// (feedbackList.ts); `expand=all` opens every row; "Open trace" (Feedback.trace_url) on each row.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { api, lastSegment } from "../api";
import { h, iso, mount, timeEl } from "../dom";
import { Author, Category, ListFeedbackRequestSchema, Sentiment, Status, type Feedback } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { agentName, agentNames, loadAgentNames, STATUS_NAMES, statusName, turnLabel } from "../names";
import { go } from "../router";
import { categoryLabel, categoryOf, TAXONOMY } from "../taxonomy";
import { claimBadge, turnIndexOf, turnRemovedBadge } from "../components/queueItem";
import { feedbackRow } from "../components/feedbackList";
import { traceUiLink } from "../components/evidence";
import { dataTable } from "../components/dataTable";

export const FEEDBACK_PAGE_SIZE = 25;
const AUTHORS: [string, string][] = [["USER", "the owner"], ["AGENT", "the agent"], ["PLATFORM", "the platform"]];
const AUTHOR_TEXT: Record<number, string> = { [Author.USER]: "owner", [Author.AGENT]: "agent", [Author.PLATFORM]: "platform" };
const KEYS = ["agent", "status", "author", "sentiment", "category", "from", "to", "text", "trace"] as const;

const dayStart = (d: string, end = false) => {
  const t = Date.parse(`${d}T00:00:00`) + (end ? 86_400_000 - 1 : 0);
  return Number.isFinite(t) ? { seconds: BigInt(Math.floor(t / 1000)), nanos: end ? 999_000_000 : 0 } : undefined;
};

/** The ListFeedback request a Feedback-page URL names (dates are the viewer's local days). */
export function feedbackRequest(q: URLSearchParams): MessageInitShape<typeof ListFeedbackRequestSchema> {
  return {
    instance: q.get("agent") ? `instances/${q.get("agent")}` : "",
    status: STATUS_NAMES.find(([, n]) => n === q.get("status"))?.[0] ?? Status.UNSPECIFIED,
    author: Author[(q.get("author") ?? "") as keyof typeof Author] ?? Author.UNSPECIFIED,
    sentiment: Sentiment[(q.get("sentiment") ?? "") as keyof typeof Sentiment] ?? Sentiment.UNSPECIFIED,
    category: q.get("category") ? categoryOf(q.get("category")!) : Category.UNSPECIFIED,
    startTime: q.get("from") ? dayStart(q.get("from")!) : undefined,
    endTime: q.get("to") ? dayStart(q.get("to")!, true) : undefined,
    text: q.get("text") ?? "",
    traceId: q.get("trace") ?? "",
  };
}

function filters(q: URLSearchParams): HTMLFormElement {
  const sel = (key: string, label: string, options: [string, string][], id = `f-${key}`, any = "any") =>
    h("label", {}, `${label} `, h("select", { name: key, id, "aria-label": label }, h("option", { value: "" }, any),
      options.map(([v, l]) => h("option", { value: v, selected: q.get(key) === v }, l))));
  const input = (key: string, label: string, type: string, placeholder = "") =>
    h("label", {}, `${label} `, h("input", { name: key, id: `f-${key}`, type, "aria-label": label, placeholder, value: q.get(key) ?? "" }));
  const agents = [...agentNames().entries()].map(([name, display]) => [lastSegment(name), display || lastSegment(name)] as [string, string]);
  const form = h("form", { class: "feed-filters inline-form fb-filters", role: "search" },
    sel("agent", "Agent", agents),
    sel("status", "Status", STATUS_NAMES.map(([, n]) => [n, n] as [string, string]), "status-filter", "all statuses"),
    sel("author", "Reported by", AUTHORS),
    sel("sentiment", "Sentiment", [["GOOD", "good"], ["BAD", "bad"]]),
    sel("category", "Category", TAXONOMY.report_categories.map((c) => [c.category, c.label])),
    input("from", "From", "date"), input("to", "To", "date"),
    input("text", "Text", "search", "words in the report or the quote"),
    input("trace", "Turn (trace id)", "search", "32 hex"),
    h("button", { type: "submit" }, "Filter"));
  const apply = () => {
    const next = new URLSearchParams();
    for (const k of KEYS) {
      const v = (form.elements.namedItem(k) as HTMLInputElement | HTMLSelectElement | null)?.value.trim() ?? "";
      if (v) next.set(k, v);
    }
    if (q.get("expand")) next.set("expand", q.get("expand")!);
    go(`#/feedback${next.toString() ? `?${next}` : ""}`);
  };
  form.addEventListener("submit", (ev) => { ev.preventDefault(); apply(); });
  form.querySelectorAll("select, input[type=date]").forEach((s) => s.addEventListener("change", apply));
  return form;
}

const millis = (fb: Feedback) => fb.createTime ? Number(fb.createTime.seconds) * 1000 + fb.createTime.nanos / 1e6 : 0;

export async function feedbackPage(main: HTMLElement, query: URLSearchParams): Promise<void> {
  await loadAgentNames();
  const expandAll = query.get("expand") === "all";
  const table = dataTable<Feedback>({
    cls: "fb-page", noun: "report", empty: "Nothing flagged yet.", key: (fb) => fb.name,
    label: (fb) => `the report “${fb.body.slice(0, 40)}”`,
    columns: [
      { key: "time", label: "Time", cell: (fb) => timeEl(fb.createTime ? timestampDate(fb.createTime) : undefined), sort: millis, wide: true },
      { key: "agent", label: "Agent", cell: (fb) => fb.instance ? agentName(fb.instance) : "—", sort: (fb) => agentName(fb.instance).toLowerCase() },
      { key: "turn", label: "Turn", cell: (fb) => turnIndexOf(fb) !== null ? turnLabel(turnIndexOf(fb)!) : "—", sort: (fb) => turnIndexOf(fb) ?? -1, wide: true },
      { key: "category", label: "Category", cell: (fb) => fb.category ? categoryLabel(fb.category) : h("span", { class: "muted" }, "none"), sort: (fb) => categoryLabel(fb.category) },
      { key: "author", label: "By", cell: (fb) => AUTHOR_TEXT[fb.author] ?? "owner", sort: (fb) => AUTHOR_TEXT[fb.author] ?? "", wide: true },
      { key: "status", label: "Status", cell: (fb) => [h("span", { class: `badge status-${statusName(fb.status)}` }, statusName(fb.status)), turnRemovedBadge(fb), claimBadge(fb)], sort: (fb) => fb.status },
      { key: "words", label: "Report", cell: (fb) => iso(fb.body.split("\n")[0].slice(0, 160), { class: "fb-first-line" }) },
    ],
    load: async (pageToken) => {
      const r = await api().feedback.listFeedback({ ...feedbackRequest(query), pageSize: FEEDBACK_PAGE_SIZE, pageToken });
      return { items: r.feedback, next: r.nextPageToken };
    },
    detail: (fb) => feedbackRow(fb, query.get("highlight") === fb.name),
    extra: traceUiLink,
    expand: (fb) => expandAll || query.get("highlight") === fb.name,
  });
  mount(main, h("div", { class: "page-head" }, h("h1", {}, "Feedback")), filters(query), table.el);
  await table.ready;
  main.querySelector(".feedback-row.focused")?.scrollIntoView({ block: "center" });
}
