// The Trace tab: a waterfall of one turn's spans (TraceQueryService.GetTrace), tool calls and span
// events, under one line (`cutNotice`) when the collector cut attribute values to fit its answer.
// When the collector no longer has the spans, it says so (expired / not recorded, from the ErrorInfo
// reason and the feedback row's trace_snapshot state) and shows the frozen copy kept with the
// feedback, if one is given.
import { api, Code, errorCode, errorReason, errorText, lastSegment } from "../api";
import { h, mount } from "../dom";
import { Role } from "../gen/agentfeedback/chat/v1/chat_pb";
import { TraceSnapshotState, type Feedback } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { StatusCode, type Span, type Trace } from "../gen/agentfeedback/traces/v1/traces_pb";
import type { JsonObject } from "@bufbuild/protobuf";
import { turnLabel } from "../names";

const NS_PER_MS = 1_000_000n;

export async function traceTab(panel: HTMLElement, instance: string, query: URLSearchParams): Promise<void> {
  const traceId = query.get("trace") ?? "";
  const feedbackName = query.get("feedback") ?? "";
  const picker = h("div", { class: "turns" });
  const view = h("div", { class: "trace-view" });
  mount(panel, picker, view);
  if (instance) void turnPicker(picker, instance, traceId);
  if (!traceId) {
    mount(view, h("p", { class: "muted" }, "Pick a turn to see its spans."));
    return;
  }
  let fb: Feedback | null = null;
  if (feedbackName) fb = await api().feedback.getFeedback({ name: feedbackName }).catch(() => null);
  try {
    const t = await api().traces.getTrace({ traceId });
    mount(view, h("h2", {}, "Turn ", h("code", { class: "trace-id" }, traceId)), cutNotice(t), waterfall(t.spans));
  } catch (e) {
    const code = errorCode(e);
    if (code !== Code.NotFound) {
      mount(view, h("p", { class: "error", role: "alert" }, errorText(e)));
      return;
    }
    const expired = errorReason(e) === "TRACE_EXPIRED" || fb?.traceSnapshot?.state === TraceSnapshotState.EXPIRED;
    mount(view,
      h("h2", {}, "Turn ", h("code", { class: "trace-id" }, traceId)),
      h("p", { class: "unavailable trace-missing", role: "status" },
        expired ? "Trace expired: its spans were removed by retention (14 days)." : "Trace not recorded: the collector has no span of this turn."),
      fb ? frozen(fb) : null);
  }
}

async function turnPicker(el: HTMLElement, instance: string, current: string): Promise<void> {
  try {
    const r = await api().chat.listMessages({ parent: instance, pageSize: 500 });
    const turns = r.messages.filter((m) => m.role === Role.USER);
    if (!turns.length) return;
    mount(el, h("label", { for: "turn-select" }, "Turn "),
      h("select", { id: "turn-select", onchange: (ev: Event) => {
        location.hash = `#/agents/${encodeURIComponent(lastSegment(instance))}/trace?trace=${(ev.target as HTMLSelectElement).value}`;
      } },
        h("option", { value: "" }, "choose a turn…"),
        turns.map((m) => h("option", { value: m.traceId, selected: m.traceId === current }, `${turnLabel(m.turnIndex)}: ${m.content.slice(0, 60)}`))));
  } catch {
    // The picker is a convenience; the trace view does not depend on it.
  }
}

function attr(a: JsonObject | undefined, key: string): string {
  const v = a?.[key];
  return v === undefined || v === null ? "" : typeof v === "string" ? v : JSON.stringify(v);
}

/** An event's attributes as a key / value table (strings as they are, other values as JSON). */
function attributeTable(a: JsonObject): HTMLElement {
  return h("table", { class: "attr-table" }, h("tbody", {}, Object.keys(a).sort().map((k) =>
    h("tr", { dataset: { key: k } }, h("th", { scope: "row" }, k), h("td", {}, h("code", {}, attr(a, k)))))));
}

function depthOf(spans: Span[]): Map<string, number> {
  const parent = new Map(spans.map((s) => [s.spanId, s.parentSpanId]));
  const depth = new Map<string, number>();
  for (const s of spans) {
    let d = 0;
    let p = s.parentSpanId;
    const seen = new Set<string>();
    while (p && parent.has(p) && !seen.has(p)) {
      seen.add(p);
      d++;
      p = parent.get(p) ?? "";
    }
    depth.set(s.spanId, d);
  }
  return depth;
}

/** The turn's time axis [t0, t1] in ns: from the first span's start to the last end among the spans
 *  that started while the first root span (the turn, `chat.turn`) ran. Spans that start later (the
 *  feedback service's `feedback.create`, minutes after the turn) stay off the axis: on it they would
 *  squash the turn into a sliver. Same rule as the CLI's `render_waterfall`. */
export function turnAxis(spans: Span[]): { t0: bigint; t1: bigint } {
  const ids = new Set(spans.map((s) => s.spanId));
  const byStart = [...spans].sort((a, b) => (a.startTimeUnixNano < b.startTimeUnixNano ? -1 : a.startTimeUnixNano > b.startTimeUnixNano ? 1 : 0));
  const root = byStart.find((s) => !ids.has(s.parentSpanId)) ?? byStart[0];
  const t0 = byStart[0].startTimeUnixNano;
  const t1 = byStart.filter((s) => s.startTimeUnixNano <= root.endTimeUnixNano)
    .reduce((m, s) => (s.endTimeUnixNano > m ? s.endTimeUnixNano : m), root.endTimeUnixNano);
  return { t0, t1 };
}

/** The one line saying the collector cut `t.truncatedValueCount` attribute values to fit its GetTrace
 *  answer budget (each cut value ends with `…(+N chars)`), as a `p.trace-cut-notice`; null when nothing
 *  was cut. Same words as `cut_notice` (services/common/trace_cut.py: the CLI, MCP and tickets). */
export function cutNotice(t: Trace): HTMLElement | null {
  const n = t.truncatedValueCount;
  if (n <= 0) return null;
  return h("p", { class: "unavailable trace-cut-notice", role: "status" },
    `${n === 1 ? "1 attribute value was" : `${n} attribute values were`} cut to fit the answer (GetTrace answer budget); each cut value ends with …(+N chars)`);
}

/** One row per span: name (indented by depth), service, duration, a bar placed on the turn's time axis
 *  (a span that started after the turn says how long after, instead of a bar). */
export function waterfall(spans: Span[]): HTMLElement {
  if (!spans.length) return h("p", { class: "muted" }, "No spans.");
  const { t0, t1 } = turnAxis(spans);
  const total = Number(t1 - t0) || 1;
  const depth = depthOf(spans);
  const ms = (ns: bigint) => Number(ns * 1000n / NS_PER_MS) / 1000;
  const after = (ns: bigint) => { const v = ms(ns); return v < 1000 ? `${v.toFixed(1)} ms` : v < 120_000 ? `${(v / 1000).toFixed(1)} s` : `${Math.round(v / 60_000)} min`; };
  return h("div", { class: "waterfall", role: "table", "aria-label": "Spans of the turn" },
    h("div", { class: "wf-row wf-head", role: "row" },
      h("span", { role: "columnheader" }, "span"), h("span", { role: "columnheader", class: "wf-svc" }, "service"), h("span", { role: "columnheader" }, "ms"), h("span", { role: "columnheader" }, `0 – ${ms(t1 - t0).toFixed(1)} ms`)),
    spans.map((s) => {
      const tool = attr(s.attributes, "gen_ai.tool.name");
      const left = (Number(s.startTimeUnixNano - t0) / total) * 100;
      const width = Math.max(0.5, (Number(s.endTimeUnixNano - s.startTimeUnixNano) / total) * 100);
      const err = s.statusCode === StatusCode.ERROR;
      return h("div", { class: `wf-span${tool ? " tool-call" : ""}${err ? " error" : ""}`, dataset: { span: s.spanId, name: s.name } },
        h("div", { class: "wf-row", role: "row" },
          h("span", { class: "wf-name", role: "cell", style: `padding-left:${(depth.get(s.spanId) ?? 0) * 0.9}rem` },
            s.name, tool ? h("strong", { class: "tool-name" }, ` ${tool}`) : null, err ? h("span", { class: "badge error" }, "error") : null),
          h("span", { class: "wf-svc muted", role: "cell" }, s.serviceName),
          h("span", { class: "wf-ms", role: "cell" }, ms(s.endTimeUnixNano - s.startTimeUnixNano).toFixed(1)),
          s.startTimeUnixNano > t1
            ? h("span", { class: "wf-after muted", role: "cell" }, `${after(s.startTimeUnixNano - t1)} after the turn`)
            : h("span", { class: "wf-track", role: "cell" }, h("span", { class: "wf-bar", style: `left:${left}%;width:${Math.min(width, 100 - left)}%` }))),
        tool
          ? h("dl", { class: "tool-detail" },
              h("dt", {}, "call id"), h("dd", {}, attr(s.attributes, "gen_ai.tool.call.id") || "—"),
              h("dt", {}, "arguments"), h("dd", {}, h("code", {}, attr(s.attributes, "gen_ai.tool.call.arguments") || attr(s.attributes, "tool.arguments") || "—")),
              h("dt", {}, "result"), h("dd", {}, h("code", {}, attr(s.attributes, "gen_ai.tool.call.result") || attr(s.attributes, "tool.result") || "—")))
          : null,
        s.events.length
          ? h("ul", { class: "wf-events" }, s.events.map((ev) =>
              h("li", { class: "wf-event", dataset: { event: ev.name } }, h("code", {}, ev.name), ` +${ms(ev.timeUnixNano - t0).toFixed(1)} ms `,
                ev.attributes && Object.keys(ev.attributes).length ? attributeTable(ev.attributes) : null)))
          : null,
        s.statusMessage ? h("p", { class: "error" }, s.statusMessage) : null);
    }));
}

/** The copy of the turn frozen into the feedback row (tool calls, events, spans), when the spans are gone. */
function frozen(fb: Feedback): HTMLElement {
  const ts = fb.traceSnapshot;
  if (!ts || (!ts.toolCalls.length && !ts.spans.length)) return h("p", { class: "muted" }, "No frozen copy was captured with the feedback.");
  return h("section", { class: "frozen" },
    h("h3", {}, "Frozen with the feedback"),
    h("ul", {}, ts.spans.map((s) => h("li", { class: "frozen-span" }, `${s.name} · ${s.serviceName} · ${s.durationMs.toFixed(1)} ms · ${s.status}`))),
    h("h3", {}, "Tool calls"),
    ts.toolCalls.length
      ? h("ul", {}, ts.toolCalls.map((c) => h("li", { class: "tool-call frozen-tool" }, h("strong", { class: "tool-name" }, c.name), ` ${c.status} · ${c.durationMs.toFixed(1)} ms`,
          h("div", {}, h("code", {}, c.arguments)), h("div", {}, h("code", {}, c.result)))))
      : h("p", { class: "muted" }, "none"),
    ts.events.length ? h("h3", {}, "Events") : null,
    ts.events.length ? h("ul", {}, ts.events.map((e) => h("li", {}, h("code", {}, e.name)))) : null);
}
