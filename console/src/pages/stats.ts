// The operator dashboard (scope feedback:admin; FeedbackService.GetFeedbackStats counts USER-origin
// ratings only, so branch copies never move a figure): window picker; headline likes / dislikes /
// reports / tasks marked complete; the sentiment split per dimension (scope + aspect); other systems'
// evaluations per author kind and name, apart; the trend over
// the window; reports by category; per-dimension small multiples; the completion funnel and the latest-state distribution;
// then the feeds (dashboardFeed.ts): negative signals, the filtered recent feed, the reports table with
// File issue, and the read-only per-turn viewer. Charts: charts.ts (uPlot).
import { api, errorText, principal } from "../api";
import { barChart, COLORS, dailyChart } from "../charts";
import { h, mount } from "../dom";
import { AuthorKind, RatingScope, type FeedbackStats } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { go } from "../router";
import { categoryLabel, labelOf, TAXONOMY } from "../taxonomy";
import { aspectLabel, enumLabel, plural } from "../names";
import { AUTHOR_LABELS, negativeSignals, recentFeed, reportsTable, turnViewer } from "../components/dashboardFeed";

const WINDOWS = [1, 7, 30, 90, 365];
export const DEFAULT_WINDOW = 30;

function windowPicker(days: number): HTMLElement {
  const select = h("select", { id: "window-days", "aria-label": "Window" },
    WINDOWS.map((d) => h("option", { value: String(d), selected: d === days }, d === 1 ? "last day" : `last ${d} days`)));
  select.addEventListener("change", () => go(`#/stats?window=${select.value}`));
  return h("label", { class: "window-picker" }, "Window ", select);
}

function headline(s: FeedbackStats): HTMLElement {
  const hl = s.headline;
  // The label follows the number's plural ("1 dislike", "2 dislikes").
  const stat = (one: string, other: string, v: bigint | undefined, key: string) =>
    h("div", { class: "stat", dataset: { stat: key } }, h("span", { class: "stat-value" }, (v ?? 0n).toString()),
      h("span", { class: "muted" }, plural(v ?? 0n, one, other).replace(/^\d+ /, "")));
  return h("div", {},
    h("div", { class: "stats-head" },
      stat("like", "likes", hl?.likes, "likes"), stat("dislike", "dislikes", hl?.dislikes, "dislikes"),
      stat("report", "reports", hl?.reports, "reports"), stat("task marked complete", "tasks marked complete", hl?.tasksCompleted, "tasks-completed")),
    h("p", { class: "muted" },
      h("span", { dataset: { stat: "ratings" } }, h("span", { class: "stat-value" }, s.totalRatings.toString())), s.totalRatings === 1n ? " rating in all, " : " ratings in all, ",
      h("span", { dataset: { stat: "negative" } }, h("span", { class: "stat-value" }, s.negativeRatings.toString())), s.totalRatings === 1n ? " of it negative." : " of them negative."));
}

/** Reports in the window by category, most first (the API's `categories`; the dashboard lost it once
 * and no test noticed: tests/e2e/test_console_dashboard.py reads it now). */
function categoryTable(s: FeedbackStats): HTMLElement {
  if (!s.categories.length) return h("p", { class: "muted", id: "report-categories-empty" }, "No reports in the window.");
  const rows = [...s.categories].sort((a, b) => Number(b.count - a.count));
  return h("div", { class: "table-wrap" }, h("table", { class: "report-categories" },
    h("thead", {}, h("tr", {}, ["category", "reports"].map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.map((c) => h("tr", { dataset: { category: String(c.category) } },
      h("td", {}, categoryLabel(c.category)), h("td", {}, c.count.toString()))))));
}

function splitTable(s: FeedbackStats): HTMLElement {
  if (!s.dimensions.length) return h("p", { class: "muted" }, "No ratings in the window.");
  return h("div", { class: "table-wrap" }, h("table", { class: "aspects" },
    h("thead", {}, h("tr", {}, ["scope", "aspect", "positive", "neutral", "negative", "split"].map((c) => h("th", {}, c)))),
    h("tbody", {}, s.dimensions.map((a) => {
      const tot = Number(a.positive + a.neutral + a.negative) || 1;
      const pct = (n: bigint) => `${(Number(n) / tot) * 100}%`;
      return h("tr", { dataset: { dimension: `${enumLabel(RatingScope, a.scope)}/${a.aspect}` } },
        h("td", {}, enumLabel(RatingScope, a.scope)), h("td", { title: a.aspect }, aspectLabel(a.aspect)),
        h("td", {}, a.positive.toString()), h("td", {}, a.neutral.toString()), h("td", {}, a.negative.toString()),
        h("td", {}, h("div", { class: "split", "aria-hidden": "true" },
          h("span", { class: "pos", style: `width:${pct(a.positive)}` }), h("span", { class: "neu", style: `width:${pct(a.neutral)}` }),
          h("span", { class: "neg", style: `width:${pct(a.negative)}` }))));
    }))));
}

/** Evaluations other systems sent (GetFeedbackStats.evaluations, issue 24) per author kind and name: a
 * table of their own, never added into the owners' figures above. */
function evaluationTable(s: FeedbackStats): HTMLElement {
  if (!s.evaluations.length) return h("p", { class: "muted", id: "evaluations-empty" }, "No evaluations from other systems in the window.");
  return h("div", { class: "table-wrap" }, h("table", { class: "evaluations" },
    h("thead", {}, h("tr", {}, ["author", "evaluation", "positive", "neutral", "negative", "total", "mean score"].map((c) => h("th", {}, c)))),
    h("tbody", {}, s.evaluations.map((e) => h("tr", { dataset: { evaluation: `${enumLabel(AuthorKind, e.authorKind)}/${e.name}` } },
      h("td", {}, AUTHOR_LABELS[e.authorKind] ?? "evaluator"), h("td", { title: e.name }, e.name),
      [e.positive, e.neutral, e.negative, e.total].map((n) => h("td", {}, n.toString())),
      h("td", {}, e.meanScore === undefined ? "–" : e.meanScore.toFixed(2)))))));
}

function charts(s: FeedbackStats): HTMLElement[] {
  const days = s.trend.map((d) => d.day);
  const trend = dailyChart("trend", `Per day, last ${s.windowDays} days (UTC)`, days, [
    { label: "positive", color: COLORS.good(), values: s.trend.map((d) => Number(d.positive)) },
    { label: "negative", color: COLORS.bad(), values: s.trend.map((d) => Number(d.negative)) },
    { label: "reports", color: COLORS.accent(), values: s.trend.map((d) => Number(d.reports)) },
  ]);
  const multiples = h("div", { class: "multiples" }, s.dimensions.map((d) =>
    dailyChart(`dim-${enumLabel(RatingScope, d.scope)}-${d.aspect}`, `${enumLabel(RatingScope, d.scope)} · ${aspectLabel(d.aspect)}`, d.daily.map((x) => x.day), [
      { label: "positive", color: COLORS.good(), values: d.daily.map((x) => Number(x.positive)) },
      { label: "neutral", color: COLORS.neutral(), values: d.daily.map((x) => Number(x.neutral)) },
      { label: "negative", color: COLORS.bad(), values: d.daily.map((x) => Number(x.negative)) },
    ], { small: true })));
  const f = s.funnel;
  const funnel = barChart("funnel", "Completion funnel (conversations)", ["engaged", "answered", "complete"],
    [Number(f?.engaged ?? 0n), Number(f?.withCompletionAnswer ?? 0n), Number(f?.markedComplete ?? 0n)], COLORS.accent());
  const latest = f?.latestState.length
    ? barChart("latest-state", "Latest completion answer", f.latestState.map((c) => labelOf(c.choice)), f.latestState.map((c) => Number(c.count)), COLORS.neutral())
    : h("p", { class: "muted", dataset: { chart: "latest-state" } }, "No completion answers in the window.");
  return [
    h("h2", {}, "Trend"), trend,
    h("h2", {}, "Per dimension"), s.dimensions.length ? multiples : h("p", { class: "muted" }, "No ratings in the window."),
    h("h2", {}, "Task completion"), h("div", { class: "pair" }, funnel, latest),
  ];
}

/** The dashboard: the counts (GetFeedbackStats) and each feed (ListRecentFeedback) load on their own,
 *  so a slow statistics query never holds the feeds back (and the reverse). Without feedback:admin the
 *  page is the one refusal, not one per section. */
export async function statsPage(main: HTMLElement, query: URLSearchParams = new URLSearchParams()): Promise<void> {
  const days = Math.min(365, Math.max(1, Number(query.get("window")) || DEFAULT_WINDOW));
  const head = h("div", { class: "page-head" }, h("h1", {}, "Statistics"), windowPicker(days));
  const counts = h("section", { class: "stats-counts", "aria-busy": "true" }, h("p", { class: "muted" }, "Loading the counts…"));
  const admin = principal()?.scopes.has("feedback:admin") ?? false;
  const viewer = turnViewer();
  mount(main, head, counts, admin ? [
    h("h2", {}, "Negative signals"), negativeSignals(viewer.open),
    h("h2", {}, "Recent feedback"), recentFeed(viewer.open),
    h("h2", {}, "Reports"), reportsTable(viewer.open),
    h("h2", { id: "turn-viewer" }, "One turn, one user"), viewer.el] : null);
  let st: FeedbackStats;
  try {
    st = await api().feedback.getFeedbackStats({
      windowDays: days, reactionAspect: TAXONOMY.stats.reaction_aspect,
      completionAspect: TAXONOMY.stats.completion_aspect, completeChoice: TAXONOMY.stats.complete_choice,
    });
  } catch (e) {
    mount(counts, h("p", { class: "error", role: "alert" }, errorText(e)));
    counts.removeAttribute("aria-busy");
    return;
  }
  mount(counts,
    h("p", { class: "muted" }, `Last ${st.windowDays} days (UTC), ratings given by owners (branch copies not counted).`),
    headline(st),
    h("h2", {}, "Sentiment per dimension"), splitTable(st),
    h("h2", {}, "Report categories"), categoryTable(st),
    h("h2", {}, "Evaluations from other systems"),
    h("p", { class: "muted" }, "Sent by judges, checks and reviewers over OpenTelemetry; not in the owners' figures above."),
    evaluationTable(st),
    charts(st));
  counts.removeAttribute("aria-busy");
}
