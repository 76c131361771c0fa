// What a stored report already holds, shown on its row: voice provenance (what the recogniser heard
// next to what reached the agent, the audio key), the turn's frozen tool calls (from the report itself,
// so an owner without `traces:read` sees them too), and quotes clamped to a few lines with an expand.
import { h } from "../dom";
import type { Feedback, FrozenToolCall } from "../gen/agentfeedback/feedback/v1/feedback_pb";

/** A long text clamped to `lines` lines (CSS line-clamp) with an explicit "Show all" / "Show less". */
export function clamped(cls: string, lines: number, ...content: (Node | string)[]): HTMLElement {
  const body = h("span", { class: "clamp-body", style: `--clamp:${lines}` }, ...content);
  const box = h("div", { class: `clamp ${cls}` }, body);
  const toggle = h("button", { type: "button", class: "link clamp-toggle", "aria-expanded": "false", hidden: true }, "Show all");
  toggle.addEventListener("click", () => {
    const open = box.classList.toggle("open");
    toggle.textContent = open ? "Show less" : "Show all";
    toggle.setAttribute("aria-expanded", String(open));
  });
  box.append(toggle);
  // Offer the toggle only when the text is actually cut (measured once it is laid out).
  requestAnimationFrame(() => { toggle.hidden = body.scrollHeight <= body.clientHeight + 1 && !box.classList.contains("open"); });
  return box;
}

/** Voice turns: what the recogniser heard, what reached the agent, the audio key, and how long it lives. */
export function voiceProvenance(fb: Feedback): HTMLElement | null {
  const ctx = fb.snapshot?.context;
  if (!ctx || (ctx.channel !== "CHANNEL_VOICE" && !ctx.dictation && !ctx.audioKey)) return null;
  const sent = fb.snapshot?.precedingUserText ?? "";
  return h("div", { class: "voice" },
    h("p", { class: "voice-title" }, "Spoken (voice turn)"),
    h("dl", { class: "kv" },
      h("dt", {}, "The recogniser heard"), h("dd", { class: "voice-heard" }, ctx.dictation || h("span", { class: "muted" }, "(no transcript stored)")),
      h("dt", {}, "What reached the agent"), h("dd", { class: "voice-sent" }, sent || h("span", { class: "muted" }, "—")),
      h("dt", {}, "Audio key"), h("dd", {}, ctx.audioKey ? h("code", { class: "voice-audio" }, ctx.audioKey) : h("span", { class: "muted" }, "none")),
    ),
    h("p", { class: "muted voice-note" },
      "The recording lives only as long as the transcript: once the chat is cleared or the turn deleted, " +
      "this key may point at nothing. This report keeps the words, not the audio."));
}

function toolCall(tc: FrozenToolCall): HTMLElement {
  const failed = tc.status === "ERROR";
  return h("li", { class: `tool-call-frozen${failed ? " error" : ""}`, dataset: { tool: tc.name } },
    h("div", { class: "tc-head" },
      h("code", { class: "tc-name" }, tc.name),
      h("span", { class: `badge${failed ? " error" : ""}` }, tc.status || "UNSET"),
      h("span", { class: "muted" }, `${tc.durationMs.toFixed(1)} ms`),
      tc.resultSizeBytes ? h("span", { class: "muted" }, `result ${tc.resultSizeBytes} bytes`) : null),
    tc.arguments ? clamped("tc-args", 2, h("span", { class: "muted" }, "arguments "), h("code", {}, tc.arguments)) : null,
    tc.result ? clamped("tc-result", 3, h("span", { class: "muted" }, "result "), h("code", {}, tc.result)) : null);
}

/** The frozen tool calls of the report's turn, inline (from the report, not the trace service). */
export function frozenToolCalls(fb: Feedback): HTMLElement | null {
  const calls = fb.traceSnapshot?.toolCalls ?? [];
  if (!calls.length) return null;
  const names = [...new Set(calls.map((c) => c.name))].slice(0, 5).join(", ");
  const failed = calls.filter((c) => c.status === "ERROR").length;
  // Closed by default (rows stay compact); the summary already names the tools and any failure.
  return h("details", { class: "frozen-tools" },
    h("summary", {}, `${calls.length} tool call${calls.length === 1 ? "" : "s"}: ${names}`,
      failed ? h("span", { class: "badge error" }, `${failed} failed`) : null,
      h("span", { class: "muted" }, " (frozen with the report)")),
    h("ul", { class: "tool-calls" }, calls.map(toolCall)));
}

/** "Open trace" in the SREs' trace view (`Feedback.trace_url`, the server's configured template filled
 *  with the turn's trace id), in a new tab; null when the server sent none (no template, or no trace). */
export function traceUiLink(fb: Feedback): HTMLElement | null {
  if (!/^https?:\/\//i.test(fb.traceUrl)) return null;
  return h("a", { href: fb.traceUrl, class: "trace-ui-link", target: "_blank", rel: "noopener noreferrer", title: "The turn in the trace view (new tab)" }, "Open trace");
}
