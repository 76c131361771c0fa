// The account-wide Feedback page (#/feedback): every report of the caller as a table. Every filter
// ListFeedback offers is a control here and is applied by the server (agent, status, author kind,
// sentiment, category, time range, text, one turn's trace id); the filters live in the URL. Pages are
// the API's page tokens (Next / Previous keep a stack of the tokens seen). Columns sort the rows of the
// page on screen (the server's order is newest first). A row expands to the whole report: evidence,
// links, triage, file, delete, history (feedbackList.ts); `expand=all` opens every row.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { api, errorText, lastSegment } from "../api";
import { h, mount, timeEl } from "../dom";
import { Author, Category, ListFeedbackRequestSchema, Sentiment, Status, type Feedback } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { agentName, agentNames, loadAgentNames, plural, STATUS_NAMES, statusName, turnLabel } from "../names";
import { go } from "../router";
import { categoryLabel, categoryOf, TAXONOMY } from "../taxonomy";
import { claimBadge, turnIndexOf } from "../components/queueItem";
import { feedbackRow } from "../components/feedbackList";
import { traceUiLink } from "../components/evidence";

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

type SortKey = "time" | "agent" | "turn" | "category" | "author" | "status";
const sortValue: Record<SortKey, (fb: Feedback) => string | number> = {
  time: (fb) => Number(fb.createTime?.seconds ?? 0n),
  agent: (fb) => agentName(fb.instance).toLowerCase(),
  turn: (fb) => turnIndexOf(fb) ?? -1,
  category: (fb) => categoryLabel(fb.category),
  author: (fb) => AUTHOR_TEXT[fb.author] ?? "",
  status: (fb) => fb.status,
};

export async function feedbackPage(main: HTMLElement, query: URLSearchParams): Promise<void> {
  await loadAgentNames();
  const expandAll = query.get("expand") === "all";
  const body = h("tbody", {});
  const error = h("p", { class: "error", role: "alert" });
  const pageInfo = h("span", { class: "muted fb-page-info", role: "status" });
  const prev = h("button", { type: "button", class: "fb-prev", disabled: true }, "Previous page");
  const next = h("button", { type: "button", class: "fb-next", disabled: true }, "Next page");
  let sort: { key: SortKey; desc: boolean } = { key: "time", desc: true };
  let rows: Feedback[] = [];
  const tokens: string[] = [""]; // tokens[i] = the page token of page i
  let page = 0;

  const th = (key: SortKey, label: string) => {
    const b = h("button", { type: "button", class: "link sort", dataset: { sort: key } }, label);
    b.addEventListener("click", () => {
      sort = { key, desc: sort.key === key ? !sort.desc : key === "time" };
      draw();
    });
    return h("th", { scope: "col", class: `col-${key}`, "aria-sort": "none" }, b);
  };
  const head = h("tr", {}, th("time", "Time"), th("agent", "Agent"), th("turn", "Turn"), th("category", "Category"),
    th("author", "By"), th("status", "Status"), h("th", { scope: "col", class: "col-words" }, "Report"), h("th", { scope: "col" }, h("span", { class: "offscreen" }, "Details")));
  const table = h("table", { class: "fb-table" }, h("thead", {}, head), body);

  const detail = (fb: Feedback, tr: HTMLElement): void => {
    const open = tr.nextElementSibling?.classList.contains("fb-detail");
    const btn = tr.querySelector<HTMLButtonElement>(".fb-expand")!;
    if (open) { tr.nextElementSibling!.remove(); btn.setAttribute("aria-expanded", "false"); btn.textContent = "Details"; return; }
    const card = feedbackRow(fb, query.get("highlight") === fb.name);
    tr.after(h("tr", { class: "fb-detail", dataset: { name: fb.name } }, h("td", { colspan: "8" }, card)));
    btn.setAttribute("aria-expanded", "true");
    btn.textContent = "Hide";
  };

  const rowOf = (fb: Feedback): HTMLElement => {
    const turn = turnIndexOf(fb);
    const expand = h("button", { type: "button", class: "fb-expand", "aria-expanded": "false", "aria-label": `Details of the report “${fb.body.slice(0, 40)}”` }, "Details");
    const tr = h("tr", { class: "fb-tr", dataset: { name: fb.name } },
      h("td", { class: "col-time" }, timeEl(fb.createTime ? timestampDate(fb.createTime) : undefined)),
      h("td", { class: "col-agent" }, fb.instance ? agentName(fb.instance) : "—"),
      h("td", { class: "col-turn" }, turn !== null ? turnLabel(turn) : "—"),
      h("td", { class: "col-category" }, fb.category ? categoryLabel(fb.category) : h("span", { class: "muted" }, "none")),
      h("td", { class: "col-author" }, AUTHOR_TEXT[fb.author] ?? "owner"),
      h("td", { class: "col-status" }, h("span", { class: `badge status-${statusName(fb.status)}` }, statusName(fb.status)), claimBadge(fb)),
      h("td", { class: "col-words" }, h("span", { class: "fb-first-line" }, fb.body.split("\n")[0].slice(0, 160))),
      h("td", { class: "col-actions" }, expand, traceUiLink(fb)));
    expand.addEventListener("click", () => detail(fb, tr));
    return tr;
  };

  const draw = () => {
    const v = sortValue[sort.key];
    const sorted = [...rows].sort((a, b) => {
      const x = v(a), y = v(b);
      return (x < y ? -1 : x > y ? 1 : 0) * (sort.desc ? -1 : 1);
    });
    head.querySelectorAll("th[aria-sort]").forEach((c) => c.setAttribute("aria-sort", "none"));
    head.querySelector(`th.col-${sort.key}`)?.setAttribute("aria-sort", sort.desc ? "descending" : "ascending");
    mount(body, sorted.length ? sorted.map(rowOf) : h("tr", {}, h("td", { colspan: "8", class: "muted empty" }, "Nothing flagged yet.")));
    for (const tr of body.querySelectorAll<HTMLElement>("tr.fb-tr")) {
      const fb = rows.find((x) => x.name === tr.dataset.name)!;
      if (expandAll || query.get("highlight") === fb.name) detail(fb, tr);
    }
  };

  const load = async (to: number) => {
    error.textContent = "";
    table.setAttribute("aria-busy", "true");
    try {
      const r = await api().feedback.listFeedback({ ...feedbackRequest(query), pageSize: FEEDBACK_PAGE_SIZE, pageToken: tokens[to] });
      page = to;
      rows = r.feedback;
      tokens[to + 1] = r.nextPageToken;
      tokens.length = to + 2;
      prev.disabled = page === 0;
      next.disabled = !r.nextPageToken;
      pageInfo.textContent = `Page ${page + 1}: ${plural(rows.length, "report")}${r.nextPageToken ? ", more on the next page" : ""}`;
      draw();
    } catch (e) {
      error.textContent = errorText(e);
    } finally {
      table.removeAttribute("aria-busy");
    }
  };
  prev.addEventListener("click", () => void load(page - 1));
  next.addEventListener("click", () => void load(page + 1));

  mount(main, h("div", { class: "page-head" }, h("h1", {}, "Feedback")), filters(query), error,
    h("div", { class: "table-wrap" }, table), h("div", { class: "fb-pager inline-form" }, prev, pageInfo, next));
  await load(0);
  main.querySelector(".feedback-row.focused")?.scrollIntoView({ block: "center" });
}
