// An agent's page: tabs Chat, Feedback (this agent's reports, whatever the agent declares), Trace.
import { api, errorText } from "../api";
import { h, mount } from "../dom";
import type { Instance } from "../gen/agentfeedback/chat/v1/chat_pb";
import { chatTab } from "./chat";
import { feedbackList } from "../components/feedbackList";
import { traceTab } from "./trace";

const TABS: [string, string][] = [
  ["chat", "Chat"],
  ["feedback", "Feedback"],
  ["trace", "Trace"],
];

export async function agentPage(main: HTMLElement, id: string, tab: string, query: URLSearchParams): Promise<void> {
  const instance = `instances/${id}`;
  const title = h("h1", {}, id);
  const sub = h("p", { class: "muted" });
  const tabs = h("nav", { class: "tabs", role: "tablist", "aria-label": "Agent sections" },
    TABS.map(([key, label]) =>
      h("a", { href: `#/agents/${encodeURIComponent(id)}/${key}`, role: "tab", "aria-selected": String(key === tab), class: key === tab ? "active" : "" }, label)));
  const panel = h("section", { class: "tab-panel", role: "tabpanel" });
  // One compact row (back link, name, agent slug) so the conversation starts high on a phone.
  mount(main, h("div", { class: "agent-head" }, h("a", { href: "#/agents", class: "back", "aria-label": "Back to Agents" }, "← Agents"), title, sub), tabs, panel);
  let info: Instance | null = null;
  if (id !== "_") {
    try {
      const i = await api().chat.getInstance({ name: instance });
      info = i;
      title.textContent = i.displayName || id;
      sub.textContent = `agent ${i.agent}`;
    } catch (e) {
      // Not this user's agent (NOT_FOUND) or the service is down: no composer, no tabs to act on.
      sub.textContent = errorText(e);
      sub.setAttribute("role", "alert");
      tabs.remove();
      panel.remove();
      return;
    }
  }
  if (tab === "feedback") await feedbackList(panel, { instance });
  else if (tab === "trace") await traceTab(panel, id === "_" ? "" : instance, query);
  else await chatTab(panel, instance, query, info);
}
