// Suspected defects: the turns in which the platform caught its own agent misbehaving (a tool result
// cut, a result no tool returned, a failed tool call or turn; ChatService.ListSuspectedDefects), apart
// from what people said. The owner sees their agents' turns; an operator (feedback:admin) may list every
// owner's (`instances/-`). One action turns a defect into a report anchored to that turn
// (FeedbackService.ReportSuspectedDefect; the server writes the report's sentence).
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { api, errorText, lastSegment, principal, uuid4 } from "../api";
import { h, mount, timeEl } from "../dom";
import { DefectKind, type SuspectedDefect } from "../gen/agentfeedback/chat/v1/chat_pb";
import { go } from "../router";
import { clamped } from "./evidence";

const KIND_TEXT: Record<number, string> = {
  [DefectKind.TRUNCATED]: "a tool result was cut",
  [DefectKind.INVENTED_RESULT]: "the reply claimed a result no tool returned",
  [DefectKind.TOOL_ERROR]: "a tool call failed",
  [DefectKind.TURN_ERROR]: "the turn failed",
};

function instanceOf(d: SuspectedDefect): string {
  return d.name.split("/suspectedDefects/")[0];
}

function reportButton(d: SuspectedDefect): HTMLElement {
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
      mount(msg, "Reported. ", h("a", { href: `#/feedback?highlight=${encodeURIComponent(fb.name)}` }, "See it on the Feedback page"), ".");
    } catch (e) {
      msg.className = "defect-msg error";
      msg.textContent = `${errorText(e)} — you can try again.`;
      b.disabled = false;
    }
  });
  return h("span", { class: "defect-actions" }, b, msg);
}

function defectRow(d: SuspectedDefect, names: Map<string, string>, everyOwner: boolean): HTMLElement {
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
    everyOwner ? null : reportButton(d));
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
  const found: SuspectedDefect[] = [];
  try {
    const inst = await api().chat.listInstances({ pageSize: 200 });
    for (const i of inst.instances) names.set(i.name, i.displayName);
    const parents = everyOwner ? ["instances/-"] : inst.instances.map((i) => i.name);
    const pages = await Promise.all(parents.map((parent) => api().chat.listSuspectedDefects({ parent, pageSize: 100 })));
    for (const p of pages) found.push(...p.suspectedDefects);
  } catch (e) {
    error.textContent = errorText(e);
  }
  found.sort((a, b) => Number((b.time?.seconds ?? 0n) - (a.time?.seconds ?? 0n)));
  mount(list, found.length ? found.map((d) => defectRow(d, names, everyOwner)) : h("p", { class: "muted empty" }, "Nothing flagged by the platform."));
  list.removeAttribute("aria-busy");
}
