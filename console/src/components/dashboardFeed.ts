// The dashboard's lists (feedback:admin), each a table (dataTable.ts: sortable columns, the API's page
// tokens, a row expanding to the whole rating or report): negative signals across every scope, the
// recent feed with the server's scope / aspect / sentiment / category / reason / choice / text filters,
// the reports (`reports_only`) with File issue (FeedbackService.ListRecentFeedback), and a read-only
// viewer of everything one user said about one turn (GetTurnFeedback; reading another owner's report
// bodies there is audited server-side).
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { api, errorText, principal } from "../api";
import { h, iso, mount, timeEl } from "../dom";
import {
  AuthorKind, Category, RatingOrigin, RatingScope, RatingSentiment, Sentiment, type Feedback, type Rating, type RecentItem,
} from "../gen/agentfeedback/feedback/v1/feedback_pb";

/** The filter part of a ListRecentFeedbackRequest (paging is the list's). */
interface FeedFilter { scope?: RatingScope; aspect?: string; sentiment?: RatingSentiment; category?: Category; reason?: string; choice?: string; text?: string; negativeOnly?: boolean }
import { allChoices, allReasons, categoryLabel, categoryOf, labelOf, TAXONOMY } from "../taxonomy";
import { clamped, traceUiLink } from "./evidence";
import { dataTable, type Column } from "./dataTable";
import { fileControl } from "./rowActions";
import { agentName, aspectLabel, enumLabel, plural, statusName, turnLabel } from "../names";
import { complaintTurnLink } from "./queueItem";

type Open = (conversation: string, turnIndex: number, user: string) => void;

const sentimentBadge = (s: RatingSentiment) =>
  h("span", { class: `badge sent-${enumLabel(RatingSentiment, s).replace(/^rating sentiment /, "")}` }, enumLabel(RatingSentiment, s).replace(/^rating sentiment /, ""));
const scopeName = (s: RatingScope) => enumLabel(RatingScope, s).replace(/^rating scope /, "");

function viewButton(open: Open, conversation: string, turn: number, user: string): HTMLElement | null {
  if (!conversation) return null;
  const b = h("button", { type: "button", class: "view-turn" }, "View turn");
  b.addEventListener("click", () => open(conversation, turn, user));
  return b;
}

/** Who judged, for an evaluation another system sent (issue 24; `evaluator` set): an owner's own rating
 * gets no label. */
export const AUTHOR_LABELS: Partial<Record<AuthorKind, string>> = {
  [AuthorKind.LLM]: "LLM judge", [AuthorKind.CODE]: "code check", [AuthorKind.HUMAN]: "human reviewer",
};
function authorBadge(r: Rating): HTMLElement | null {
  if (!r.evaluator) return null;
  const score = r.score !== undefined ? ` · score ${r.score}` : "";
  return h("span", { class: "badge author-kind", title: `${r.evaluator}${r.label ? ` · ${r.label}` : ""}${score}` },
    AUTHOR_LABELS[r.authorKind] ?? "evaluator");
}

export function ratingRow(r: Rating, open?: Open): HTMLElement {
  return h("li", { class: "feed-item rating", dataset: { aspect: r.aspect, scope: scopeName(r.scope) } },
    h("div", { class: "fb-head" },
      timeEl(r.updateTime ? timestampDate(r.updateTime) : undefined),
      h("span", { class: "fb-agent" }, r.user),
      h("span", { class: "feed-dim", title: `${scopeName(r.scope)} · ${r.aspect}` }, `${aspectLabel(r.aspect)}${r.artifactId ? ` · artifact ${r.artifactId}` : ""}`),
      sentimentBadge(r.sentiment),
      r.choice ? h("span", { class: "badge feed-choice" }, labelOf(r.choice)) : null,
      r.origin === RatingOrigin.BRANCH_COPY ? h("span", { class: "badge copy" }, "branch copy") : null,
      authorBadge(r), r.evaluator && r.label ? h("span", { class: "badge feed-choice" }, r.label) : null),
    r.reasons.length ? h("p", { class: "feed-reasons" }, r.reasons.map((x) => h("span", { class: "badge reason-badge" }, labelOf(x)))) : null,
    r.note ? clamped("feed-note", 3, r.note) : null,
    h("div", { class: "feed-foot muted" }, `${agentName(r.conversation)} · ${turnLabel(r.turnIndex)} `, open ? viewButton(open, r.conversation, r.turnIndex, r.user) : null));
}

export function reportItem(fb: Feedback, open?: Open): HTMLElement {
  return h("li", { class: "feed-item report", dataset: { name: fb.name } },
    h("div", { class: "fb-head" },
      timeEl(fb.createTime ? timestampDate(fb.createTime) : undefined),
      h("span", { class: "fb-agent" }, fb.owner),
      h("span", { class: "badge" }, "report"),
      fb.category ? h("span", { class: "badge feed-category" }, categoryLabel(fb.category)) : null,
      fb.sentiment === Sentiment.BAD ? h("span", { class: "badge sent-negative" }, "bad") : null,
      h("span", { class: `badge status-${statusName(fb.status)}` }, statusName(fb.status))),
    clamped("feed-body", 3, iso(fb.body)),
    complaintTurnLink(fb),
    h("div", { class: "feed-foot muted" }, fb.instance ? `${agentName(fb.instance)} · ${turnLabel(fb.snapshot?.turnIndex ?? 0)} ` : "",
      open ? viewButton(open, fb.instance, fb.snapshot?.turnIndex ?? 0, fb.owner) : null, traceUiLink(fb)));
}

const itemTime = (it: RecentItem) => it.item.case === "rating" ? it.item.value.updateTime
  : it.item.case === "feedback" ? it.item.value.createTime : undefined;
const millis = (t: { seconds: bigint; nanos: number } | undefined) => t ? Number(t.seconds) * 1000 + t.nanos / 1e6 : 0;
const secs = (it: RecentItem) => millis(itemTime(it));
const conversationOf = (it: RecentItem) => it.item.case === "rating" ? it.item.value.conversation : it.item.case === "feedback" ? it.item.value.instance : "";
const turnOf = (it: RecentItem) => it.item.case === "rating" ? it.item.value.turnIndex : it.item.case === "feedback" ? it.item.value.snapshot?.turnIndex ?? 0 : 0;
const whoOf = (it: RecentItem) => it.item.case === "rating" ? it.item.value.user : it.item.case === "feedback" ? it.item.value.owner : "";
const whatOf = (it: RecentItem) => it.item.case === "rating"
  ? `${aspectLabel(it.item.value.aspect)}${it.item.value.artifactId ? ` · artifact ${it.item.value.artifactId}` : ""}`
  : it.item.case === "feedback" ? `Report${it.item.value.category ? `: ${categoryLabel(it.item.value.category)}` : ""}` : "";
const keyOf = (it: RecentItem) => it.item.case === "rating" ? `rating:${it.item.value.name}` : it.item.case === "feedback" ? it.item.value.name : "";
const sentimentOf = (it: RecentItem) => it.item.case === "rating" ? enumLabel(RatingSentiment, it.item.value.sentiment).replace(/^rating sentiment /, "")
  : it.item.case === "feedback" && it.item.value.sentiment === Sentiment.BAD ? "negative" : it.item.case === "feedback" && it.item.value.sentiment === Sentiment.GOOD ? "positive" : "";

/** The columns of a feed of ratings and reports (time, who, agent, turn, what, judgement, reasons). */
const FEED_COLUMNS: Column<RecentItem>[] = [
  { key: "time", label: "Time", cell: (it) => timeEl(itemTime(it) ? timestampDate(itemTime(it)!) : undefined), sort: secs },
  { key: "who", label: "Who", cell: whoOf, sort: whoOf },
  { key: "agent", label: "Agent", cell: (it) => agentName(conversationOf(it)), sort: (it) => agentName(conversationOf(it)).toLowerCase(), wide: true },
  { key: "turn", label: "Turn", cell: (it) => turnLabel(turnOf(it)), sort: turnOf, wide: true },
  { key: "what", label: "What", cell: (it) => h("span", { class: it.item.case === "rating" ? "feed-dim" : "badge" }, whatOf(it)), sort: whatOf },
  { key: "judgement", label: "Judgement", sort: sentimentOf, cell: (it) => it.item.case === "rating"
    ? [sentimentBadge(it.item.value.sentiment), it.item.value.choice ? h("span", { class: "badge feed-choice" }, labelOf(it.item.value.choice)) : null]
    : it.item.case === "feedback" ? [it.item.value.sentiment === Sentiment.BAD ? h("span", { class: "badge sent-negative" }, "bad") : null,
      h("span", { class: `badge status-${statusName(it.item.value.status)}` }, statusName(it.item.value.status))] : null },
  { key: "reasons", label: "Reasons", wide: true, cell: (it) => it.item.case === "rating"
    ? it.item.value.reasons.map((x) => h("span", { class: "badge reason-badge" }, labelOf(x))) : null },
];

/** A feed of ListRecentFeedback as a table (dataTable.ts); `request` is read again on every reload. */
function feedTable(cls: string, request: () => FeedFilter, open: Open, empty: string, pageSize: number): { el: HTMLElement; reload: () => void } {
  return dataTable<RecentItem>({
    cls, columns: FEED_COLUMNS, empty, noun: "item", key: keyOf,
    label: (it) => `${whatOf(it)} by ${whoOf(it)}`,
    load: async (pageToken) => {
      const r = await api().feedback.listRecentFeedback({ ...request(), pageSize, pageToken });
      return { items: r.items.filter((it) => it.item.case), next: r.nextPageToken };
    },
    detail: (it) => h("ul", { class: "feed" }, it.item.case === "rating" ? ratingRow(it.item.value, open) : reportItem(it.item.value as Feedback, open)),
  });
}

export function negativeSignals(open: Open): HTMLElement {
  return feedTable("negative-feed", () => ({ negativeOnly: true }), open, "No negative signals.", 10).el;
}

export function recentFeed(open: Open): HTMLElement {
  const sel = (id: string, label: string, options: [string, string][]) =>
    h("label", {}, `${label} `, h("select", { id, "aria-label": label }, h("option", { value: "" }, "any"), options.map(([v, l]) => h("option", { value: v }, l))));
  const scopes = Object.entries(RatingScope).filter(([, v]) => typeof v === "number" && v !== 0)
    .map(([k, v]) => [String(v), k.toLowerCase()] as [string, string]);
  const aspects = [...new Set(TAXONOMY.questions.map((q) => q.aspect))].map((a) => [a, aspectLabel(a)] as [string, string]);
  const sentiments: [string, string][] = [[String(RatingSentiment.POSITIVE), "positive"], [String(RatingSentiment.NEUTRAL), "neutral"], [String(RatingSentiment.NEGATIVE), "negative"]];
  const categories = TAXONOMY.report_categories.map((c) => [String(categoryOf(c.category)), c.label] as [string, string]);
  const reasons = allReasons().map((r) => [r.slug, r.label] as [string, string]);
  const choices = [...new Map(allChoices().map((c) => [c.slug, c.label])).entries()] as [string, string][];
  const text = h("input", { type: "search", id: "feed-text", "aria-label": "Text", placeholder: "text in the note or report" });
  const filters = h("form", { class: "feed-filters inline-form" },
    sel("feed-scope", "Scope", scopes), sel("feed-aspect", "Aspect", aspects), sel("feed-sentiment", "Sentiment", sentiments),
    sel("feed-category", "Category", categories), sel("feed-reason", "Reason", reasons), sel("feed-choice", "Choice", choices),
    h("label", {}, "Text ", text), h("button", { type: "submit" }, "Filter"));
  const val = (id: string) => (filters.querySelector<HTMLSelectElement>(`#${id}`)?.value ?? "");
  const list = feedTable("recent-feed", () => ({
    scope: Number(val("feed-scope")) as RatingScope, aspect: val("feed-aspect"), sentiment: Number(val("feed-sentiment")) as RatingSentiment,
    category: Number(val("feed-category")) as Category, reason: val("feed-reason"), choice: val("feed-choice"), text: text.value.trim(),
  }), open, "Nothing matches.", 20);
  filters.addEventListener("submit", (ev) => { ev.preventDefault(); list.reload(); });
  filters.querySelectorAll("select").forEach((s) => s.addEventListener("change", () => list.reload()));
  return h("div", {}, filters, list.el);
}

/** Every owner's reports (ListRecentFeedback `reports_only`, newest first) as a table, with File issue
 *  on the caller's own reports without a link; a row expands to the report. */
export function reportsTable(open: Open): HTMLElement {
  const text = (fb: Feedback) => fb.body.split("\n")[0].slice(0, 160);
  const table: { el: HTMLElement; reload: () => void } = dataTable<Feedback>({
    cls: "reports-table", empty: "No reports.", noun: "report", key: (fb) => fb.name, label: (fb) => `the report “${fb.body.slice(0, 40)}”`,
    columns: [
      { key: "time", label: "Time", cell: (fb) => timeEl(fb.createTime ? timestampDate(fb.createTime) : undefined), sort: (fb) => millis(fb.createTime) },
      { key: "owner", label: "Owner", cell: (fb) => fb.owner, sort: (fb) => fb.owner },
      { key: "agent", label: "Agent", cell: (fb) => fb.instance ? agentName(fb.instance) : "—", sort: (fb) => agentName(fb.instance).toLowerCase(), wide: true },
      { key: "category", label: "Category", cell: (fb) => fb.category ? categoryLabel(fb.category) : h("span", { class: "muted" }, "none"), sort: (fb) => categoryLabel(fb.category) },
      { key: "status", label: "Status", cell: (fb) => h("span", { class: `badge status-${statusName(fb.status)}` }, statusName(fb.status)), sort: (fb) => fb.status },
      { key: "words", label: "Report", cell: (fb) => iso(text(fb), { class: "fb-first-line report-body" }) },
      { key: "issue", label: "Issue", cell: (fb) => fb.issueUrl ? h("a", { href: fb.issueUrl, class: "issue-link", rel: "noopener noreferrer", target: "_blank" }, "issue")
        // FileFeedback is owner-scoped (another owner's report is NOT_FOUND), so only the owner's rows offer it.
        : fb.owner === principal()?.sub ? fileControl(fb, () => table.reload())
        : h("span", { class: "muted not-yours", title: "FileFeedback is owner-scoped: the owner files it (Feedback page)." }, "owner files") },
    ],
    load: async (pageToken) => {
      const r = await api().feedback.listRecentFeedback({ reportsOnly: true, pageSize: 20, pageToken });
      return { items: r.items.flatMap((it) => it.item.case === "feedback" ? [it.item.value] : []), next: r.nextPageToken };
    },
    detail: (fb) => h("ul", { class: "feed" }, reportItem(fb, open)),
  });
  return table.el;
}

/** The per-turn viewer: conversation + turn + user → every rating (origin marked) and report. */
export function turnViewer(): { el: HTMLElement; open: Open } {
  const conv = h("input", { id: "tv-conversation", "aria-label": "Conversation", placeholder: "instances/…" });
  const turn = h("input", { id: "tv-turn", type: "number", min: "1", "aria-label": "Turn (1-based)", placeholder: "turn" });
  const user = h("input", { id: "tv-user", "aria-label": "User", placeholder: "user (sub)" });
  const out = h("div", { class: "turn-view", "aria-live": "polite" });
  const show = async () => {
    mount(out, h("p", { class: "muted" }, "Loading…"));
    try {
      const t = await api().feedback.getTurnFeedback({ conversation: conv.value.trim(), turnIndex: Math.max(0, Number(turn.value) - 1), user: user.value.trim() });
      mount(out,
        h("p", { class: "muted" }, `${t.user} on ${agentName(t.conversation)}, ${turnLabel(t.turnIndex).toLowerCase()}: ${plural(t.ratings.length, "rating")}, ${plural(t.feedback.length, "report")}. Read-only.`),
        h("ul", { class: "feed tv-ratings" }, t.ratings.map((r) => ratingRow(r))),
        h("ul", { class: "feed tv-reports" }, t.feedback.map((f) => reportItem(f))),
        t.evaluations.length ? h("h4", {}, `Evaluations from other systems (${t.evaluations.length}), apart from what ${t.user} said`) : null,
        h("ul", { class: "feed tv-evaluations" }, t.evaluations.map((r) => ratingRow(r))));
    } catch (e) {
      mount(out, h("p", { class: "error", role: "alert" }, errorText(e)));
    }
  };
  const form = h("form", { class: "inline-form turn-form" }, conv, turn, user, h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); void show(); });
  const open: Open = (c, i, u) => {
    conv.value = c;
    turn.value = String(i + 1);
    user.value = u;
    void show();
    document.getElementById("turn-viewer")?.scrollIntoView({ block: "start" });
  };
  return { el: h("div", {}, form, out), open };
}
