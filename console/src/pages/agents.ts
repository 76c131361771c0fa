// The owner's agents (ChatService.ListInstances) and a form to add one (CreateInstance).
import { api, errorText, lastSegment, uuid4 } from "../api";
import { h, mount, timeEl } from "../dom";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { go } from "../router";

export async function agentsPage(main: HTMLElement): Promise<void> {
  const list = h("ul", { class: "agents", "aria-busy": "true" });
  const status = h("p", { class: "error", role: "alert" });
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
  mount(main, h("h1", {}, "Agents"), list, status, h("h2", {}, "Add an agent"), form);
  try {
    const items = [];
    let pageToken = "";
    do {
      const r = await api().chat.listInstances({ pageSize: 200, pageToken });
      items.push(...r.instances);
      pageToken = r.nextPageToken;
    } while (pageToken);
    mount(
      list,
      items.length
        ? items.map((i) =>
            h(
              "li",
              {},
              h("a", { href: `#/agents/${encodeURIComponent(lastSegment(i.name))}/chat`, class: "agent-link" }, i.displayName || lastSegment(i.name)),
              h("span", { class: "muted" }, ` ${i.agent} · created `, timeEl(i.createTime ? timestampDate(i.createTime) : undefined)),
            ),
          )
        : h("li", { class: "muted" }, "No agents yet: add one below."),
    );
  } catch (e) {
    status.textContent = errorText(e);
  } finally {
    list.removeAttribute("aria-busy");
  }
}
