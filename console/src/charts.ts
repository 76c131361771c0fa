// Charts for the operator dashboard, drawn by uPlot (npm `uplot`, MIT, ~50 kB, canvas; chosen over
// Observable Plot for its size and speed on daily series; bars use its `paths.bars` builder). Every
// chart is followed by its numbers in a table (<details> "Show the numbers as a table"), which is what screen readers and
// the browser tests read.
import type uPlotType from "uplot";
import "uplot/dist/uPlot.min.css";
import { h } from "./dom";

type UPlot = typeof uPlotType;
let loading: Promise<UPlot> | null = null;

/** uPlot, loaded on first use (only the dashboard pays for it). uPlot builds an Intl.NumberFormat from
 *  `navigator.language` when it loads; a browser whose language is not a BCP 47 tag (WebKitGTK under
 *  LANG=C reports "C") would throw a RangeError there, so such a language is replaced by "en-US" first. */
function uPlotLib(): Promise<UPlot> {
  if (!loading) {
    try {
      Intl.NumberFormat.supportedLocalesOf([navigator.language]);
    } catch {
      Object.defineProperty(navigator, "language", { configurable: true, get: () => "en-US" });
    }
    loading = import("uplot").then((m) => m.default);
  }
  return loading;
}

export interface Series {
  label: string;
  color: string;
  values: number[];
}

const css = (name: string) => getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";

/** Colours from the page's custom properties (style.css). */
export const COLORS = { good: () => css("--good"), bad: () => css("--bad"), accent: () => css("--accent"), neutral: () => "#8a93a3" };

function numbers(name: string, labels: string[], series: Series[]): HTMLElement {
  return h("details", { class: "chart-numbers" },
    h("summary", {}, "Show the numbers as a table"),
    h("table", { class: "chart-data", dataset: { chart: name } },
      h("thead", {}, h("tr", {}, h("th", {}, ""), series.map((s) => h("th", {}, s.label)))),
      h("tbody", {}, labels.map((l, i) => h("tr", { dataset: { row: l } }, h("th", {}, l), series.map((s) => h("td", {}, String(s.values[i] ?? 0))))))));
}

/** Width available to a chart inside `host` once mounted (a fallback before layout). */
function widthOf(host: HTMLElement, fallback: number): number {
  return Math.max(200, Math.floor(host.clientWidth || fallback));
}

/** A daily line chart: `days` are `YYYY-MM-DD` (UTC), one value per day per series. */
export function dailyChart(name: string, title: string, days: string[], series: Series[], opts: { height?: number; small?: boolean } = {}): HTMLElement {
  const plot = h("div", { class: "chart-plot" });
  // A window with activity on a day or two draws a flat line with a spike: say so above it.
  const active = days.filter((_, i) => series.some((x) => (x.values[i] ?? 0) > 0)).length;
  const sparse = active === 0 ? "Nothing in this window."
    : active <= 2 && days.length > 7 ? `Activity on ${active === 1 ? "one day" : "two days"} of ${days.length}: the rest are zeros.` : "";
  const fig = h("figure", { class: `chart${opts.small ? " small" : ""}${sparse ? " sparse" : ""}`, dataset: { chart: name, activeDays: String(active) } },
    h("figcaption", {}, title), sparse ? h("p", { class: "muted chart-sparse" }, sparse) : null, plot, numbers(name, days, series));
  const xs = days.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000);
  requestAnimationFrame(() => void uPlotLib().then((uPlot) => {
    const chart = new uPlot({
      width: widthOf(plot, opts.small ? 280 : 640),
      height: opts.height ?? (opts.small ? 110 : 200),
      // Hovering (or touching) a day shows its values in the legend, small multiples too.
      legend: { show: true, live: true },
      cursor: { show: true, y: false },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
      axes: [{ space: 60 }, { size: 36, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] }],
      series: [{}, ...series.map((s) => ({ label: s.label, stroke: s.color, width: 2, points: { show: days.length <= 31 } }))],
    }, [xs, ...series.map((s) => s.values)], plot);
    plot.dataset.points = String(xs.length);
    new ResizeObserver(() => chart.setSize({ width: widthOf(plot, 640), height: chart.height })).observe(plot);
  }));
  return fig;
}

/** A bar chart of labelled counts (the funnel, the latest-state distribution). */
export function barChart(name: string, title: string, labels: string[], values: number[], color: string): HTMLElement {
  const plot = h("div", { class: "chart-plot" });
  const fig = h("figure", { class: "chart", dataset: { chart: name } },
    h("figcaption", {}, title), plot, numbers(name, labels, [{ label: "count", color, values }]));
  requestAnimationFrame(() => void uPlotLib().then((uPlot) => {
    const xs = labels.map((_, i) => i);
    const chart = new uPlot({
      width: widthOf(plot, 320),
      height: 170,
      legend: { show: false },
      cursor: { show: false },
      scales: { x: { time: false, range: [-0.5, labels.length - 0.5] }, y: { range: (_u, _min, max) => [0, Math.max(1, max)] } },
      axes: [
        { splits: () => xs, values: (_u, splits) => splits.map((i) => labels[i] ?? ""), gap: 4, size: 40 },
        { size: 36, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] },
      ],
      series: [{}, { label: "count", stroke: color, fill: color, paths: uPlot.paths.bars!({ size: [0.6, 80] }), points: { show: false } }],
    }, [xs, values], plot);
    plot.dataset.points = String(xs.length);
    new ResizeObserver(() => chart.setSize({ width: widthOf(plot, 320), height: chart.height })).observe(plot);
  }));
  return fig;
}
