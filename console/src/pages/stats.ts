// Statistics (scope feedback:admin; FeedbackService.GetFeedbackStats, USER-origin ratings only):
// headline counts, sentiment split per aspect, a 30-day trend chart (inline SVG), report categories.
import { api, errorText } from "../api";
import { h, mount } from "../dom";
import { Category, RatingScope, type DailyCount } from "../gen/agentfeedback/feedback/v1/feedback_pb";

const WINDOW_DAYS = 30;
const SVG = "http://www.w3.org/2000/svg";

function enumLabel(e: Record<number, string>, v: number): string {
  return (e[v] ?? String(v)).toLowerCase().replace(/_/g, " ");
}

export async function statsPage(main: HTMLElement): Promise<void> {
  mount(main, h("h1", {}, "Statistics"), h("p", { class: "muted", "aria-busy": "true" }, "Loading…"));
  try {
    const s = await api().feedback.getFeedbackStats({ windowDays: WINDOW_DAYS });
    const headline = (label: string, v: bigint, key: string) => h("div", { class: "stat", dataset: { stat: key } }, h("span", { class: "stat-value" }, v.toString()), h("span", { class: "muted" }, label));
    mount(main,
      h("h1", {}, "Statistics"),
      h("p", { class: "muted" }, `Last ${WINDOW_DAYS} days (UTC), ratings given by owners (branch copies not counted).`),
      h("div", { class: "stats-head" },
        headline("reports", s.totalReports, "reports"), headline("ratings", s.totalRatings, "ratings"), headline("negative ratings", s.negativeRatings, "negative")),
      h("h2", {}, "Sentiment per aspect"),
      s.aspects.length
        ? h("table", { class: "aspects" },
            h("thead", {}, h("tr", {}, h("th", {}, "scope"), h("th", {}, "aspect"), h("th", {}, "positive"), h("th", {}, "neutral"), h("th", {}, "negative"), h("th", {}, "split"))),
            h("tbody", {}, s.aspects.map((a) => {
              const tot = Number(a.positive + a.neutral + a.negative) || 1;
              const pct = (n: bigint) => `${(Number(n) / tot) * 100}%`;
              return h("tr", {}, h("td", {}, enumLabel(RatingScope, a.scope)), h("td", {}, a.aspect), h("td", {}, a.positive.toString()), h("td", {}, a.neutral.toString()), h("td", {}, a.negative.toString()),
                h("td", {}, h("div", { class: "split", "aria-hidden": "true" },
                  h("span", { class: "pos", style: `width:${pct(a.positive)}` }), h("span", { class: "neu", style: `width:${pct(a.neutral)}` }), h("span", { class: "neg", style: `width:${pct(a.negative)}` }))));
            })))
        : h("p", { class: "muted" }, "No ratings in the window."),
      h("h2", {}, `Trend, ${WINDOW_DAYS} days`),
      trendChart(s.trend),
      h("h2", {}, "Report categories"),
      s.categories.length
        ? h("ul", { class: "categories" }, s.categories.map((c) => h("li", {}, `${enumLabel(Category, c.category)}: ${c.count}`)))
        : h("p", { class: "muted" }, "No categorised reports."));
  } catch (e) {
    mount(main, h("h1", {}, "Statistics"), h("p", { class: "error", role: "alert" }, errorText(e)));
  }
}

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>, ...kids: (SVGElement | string)[]): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const k of kids) el.append(k);
  return el;
}

/** Per day: reports, positive and negative ratings as three lines on one axis. */
function trendChart(trend: DailyCount[]): Element {
  if (!trend.length) return h("p", { class: "muted" }, "No data.");
  const W = 600, H = 180, P = 24;
  const series: [string, string, (d: DailyCount) => number][] = [
    ["reports", "var(--accent)", (d) => Number(d.reports)],
    ["positive", "var(--good)", (d) => Number(d.positive)],
    ["negative", "var(--bad)", (d) => Number(d.negative)],
  ];
  const max = Math.max(1, ...trend.flatMap((d) => series.map(([, , f]) => f(d))));
  const x = (i: number) => P + (i * (W - 2 * P)) / Math.max(1, trend.length - 1);
  const y = (v: number) => H - P - (v * (H - 2 * P)) / max;
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "trend", role: "img", "aria-label": `Daily reports and ratings, ${trend[0].day} to ${trend[trend.length - 1].day}` },
    svg("line", { x1: P, y1: H - P, x2: W - P, y2: H - P, class: "axis" }),
    svg("text", { x: P, y: H - 6, class: "tick" }, trend[0].day),
    svg("text", { x: W - P, y: H - 6, class: "tick", "text-anchor": "end" }, trend[trend.length - 1].day),
    svg("text", { x: 2, y: P, class: "tick" }, String(max)),
    ...series.map(([name, color, f]) =>
      svg("polyline", { points: trend.map((d, i) => `${x(i)},${y(f(d))}`).join(" "), fill: "none", stroke: color, "stroke-width": 2, "data-series": name },
        svg("title", {}, name))));
  const legend = h("p", { class: "legend" }, series.map(([name, color]) => h("span", {}, h("span", { class: "swatch", style: `background:${color}` }), ` ${name} `)));
  return h("figure", { class: "trend-figure" }, chart, legend);
}
