// The owner's agents (ChatService.ListInstances, latest activity first, searched by name on the server)
// with their activity (last turn) and counts (turns; reports and the owner's ratings from
// FeedbackService.CountConversationFeedback), forks nested under their parent (collapsible), and a form
// to add one (CreateInstance). Pages of 100 ("Show more agents"); a fork whose parent is not listed (not
// matching the search, deleted, or on a page not loaded yet) stands on its own with "fork of …".
import { api, errorText, lastSegment, uuid4 } from "../api";
import { h, mount, timeEl } from "../dom";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { go } from "../router";
import type { Instance } from "../gen/agentfeedback/chat/v1/chat_pb";
import { plural, turnLabel } from "../names";

const PAGE = 100;
type Counts = { reports: bigint; ratings: bigint };

function agentItem(i: Instance, forks: Map<string, Instance[]>, counts: Map<string, Counts>, nested: boolean): HTMLElement {
  const kids = forks.get(i.name) ?? [];
  const c = counts.get(i.name);
  const last = i.lastTurnTime ? timestampDate(i.lastTurnTime) : undefined;
  const li = h("li", { class: `agent-item${i.forkSource ? " fork" : ""}`, dataset: { name: i.name } },
    h("div", { class: "agent-head" },
      h("a", { href: `#/agents/${encodeURIComponent(lastSegment(i.name))}/chat`, class: "agent-link" }, i.displayName || lastSegment(i.name)),
      i.forkSource && !nested ? h("span", { class: "badge agent-fork-of" }, `fork of ${lastSegment(i.forkSource)}`) : null,
      i.forkSource ? h("span", { class: "muted agent-fork-turn" }, ` from ${turnLabel(i.forkTurnIndex).toLowerCase()}`) : null),
    h("div", { class: "muted agent-meta" },
      h("span", { class: "agent-slug" }, i.agent), " · ",
      last ? h("span", { class: "agent-activity" }, "last turn ", timeEl(last))
        : h("span", { class: "agent-activity" }, "no turn yet · created ", timeEl(i.createTime ? timestampDate(i.createTime) : undefined)),
      " · ", h("span", { class: "agent-counts" },
        h("span", { class: "agent-turns" }, plural(i.turnCount, "turn")),
        c ? [" · ", h("span", { class: "agent-reports" }, plural(c.reports, "report")), " · ",
          h("span", { class: "agent-ratings" }, plural(c.ratings, "rating"))] : null)));
  if (kids.length) {
    const sub = h("ul", { class: "agents agent-forks", id: `forks-${lastSegment(i.name)}` }, kids.map((k) => agentItem(k, forks, counts, true)));
    const toggle = h("button", { type: "button", class: "link forks-toggle", "aria-expanded": "true", "aria-controls": sub.id }, `Hide ${plural(kids.length, "fork")}`);
    toggle.addEventListener("click", () => {
      sub.hidden = !sub.hidden;
      toggle.setAttribute("aria-expanded", String(!sub.hidden));
      toggle.textContent = `${sub.hidden ? "Show" : "Hide"} ${plural(kids.length, "fork")}`;
    });
    li.append(toggle, sub);
  }
  return li;
}

export async function agentsPage(main: HTMLElement, query: URLSearchParams = new URLSearchParams()): Promise<void> {
  const list = h("ul", { class: "agents", "aria-busy": "true" });
  const status = h("p", { class: "error", role: "alert" });
  const more = h("button", { type: "button", class: "agents-more", hidden: true }, "Show more agents");
  const search = h("input", { id: "agent-search", type: "search", "aria-label": "Search agents by name", placeholder: "Search by name", value: query.get("q") ?? "", maxlength: "100" });
  const find = h("form", { class: "inline-form agent-find", role: "search" }, search, h("button", { type: "submit" }, "Search"));
  find.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = search.value.trim();
    go(`#/agents${q ? `?q=${encodeURIComponent(q)}` : ""}`);
  });
  const name = h("input", { id: "agent-name", required: true, placeholder: "My assistant", autocomplete: "off" });
  // The slug rule of chat/domain.py. `pattern` is compiled with the RegExp `v` flag, where an unescaped
  // '-' in a class is a syntax error that silently turns the check off: keep it escaped.
  const slug = h("input", { id: "agent-slug", required: true, value: "reference", pattern: "[a-z][a-z0-9\\-]{0,62}",
    title: "a lowercase letter, then up to 62 lowercase letters, digits or '-' (e.g. reference)" });
  const form = h(
    "form",
    {
      class: "card inline-form",
      onsubmit: async (ev: Event) => {
        ev.preventDefault();
        try {
          const inst = await api().chat.createInstance({ instance: { displayName: name.value.trim(), agent: slug.value.trim() }, requestId: uuid4() });
          go(`#/agents/${encodeURIComponent(lastSegment(inst.name))}/chat`);
        } catch (e) {
          status.textContent = errorText(e);
        }
      },
    },
    h("label", { for: "agent-name" }, "Name"),
    name,
    h("label", { for: "agent-slug" }, "Agent"),
    slug,
    h("button", { type: "submit", class: "primary" }, "Add agent"),
  );
  mount(main, h("h1", {}, "Agents"), find, list, more, status, h("h2", {}, "Add an agent"), form);

  const items: Instance[] = [];
  const counts = new Map<string, Counts>();
  let pageToken = "";
  const draw = () => {
    const listed = new Set(items.map((i) => i.name));
    const forks = new Map<string, Instance[]>();
    for (const i of items) if (i.forkSource && listed.has(i.forkSource)) forks.set(i.forkSource, [...(forks.get(i.forkSource) ?? []), i]);
    const top = items.filter((i) => !i.forkSource || !listed.has(i.forkSource));
    mount(list, top.length ? top.map((i) => agentItem(i, forks, counts, false))
      : h("li", { class: "muted" }, search.value.trim() ? "No agent's name contains that." : "No agents yet: add one below."));
  };
  const load = async () => {
    try {
      const r = await api().chat.listInstances({ pageSize: PAGE, pageToken, search: search.value.trim(), orderBy: "last_activity_time desc" });
      items.push(...r.instances);
      pageToken = r.nextPageToken;
      more.hidden = !pageToken;
      draw();
      if (r.instances.length) {
        // The counts follow the list (an owner without feedback:read still sees the agents and turns).
        const got = await api().feedback.countConversationFeedback({ conversations: r.instances.map((i) => i.name) });
        for (const c of got.counts) counts.set(c.conversation, { reports: c.reports, ratings: c.ratings });
        draw();
      }
    } catch (e) {
      status.textContent = errorText(e);
    } finally {
      list.removeAttribute("aria-busy");
    }
  };
  more.addEventListener("click", () => void load());
  await load();
}
