// The review queue (#/queue): the caller's reports that need a look, filtered on the server
// (ListFeedback: agent, category, author kind, status, age, text) with the filters kept in the URL, and
// worked through one at a time (components/queueItem.ts) with the keyboard:
//   j / n  next        k / p  previous      t  triaged      d  dismissed      o  reopen      f  file
//   x      select the open item for bulk triage
// The open item is claimed for this tab (claims.ts: a lease held by the feedback service, renewed while
// open, released on leaving), so another session sees it as claimed and does not work it too.
import { api, Code, errorCode, errorText, lastSegment, uuid4 } from "../api";
import { claim, claimedByOther, claimRefusal, holdClaim, reviewSession } from "../claims";
import { h, mount } from "../dom";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Author, Category, ListFeedbackRequestSchema, Status, type Feedback } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { agentName, agentNames, loadAgentNames, plural, STATUS_NAMES, statusName, turnLabel } from "../names";
import { go } from "../router";
import { categoryLabel, categoryOf, TAXONOMY } from "../taxonomy";
import { claimBadge, queueItemView, turnIndexOf } from "../components/queueItem";

const AGES: [string, string][] = [["1", "last day"], ["7", "last 7 days"], ["30", "last 30 days"], ["90", "last 90 days"]];
const AUTHORS: [string, string][] = [["USER", "the owner"], ["AGENT", "the agent"], ["PLATFORM", "the platform"]];
const FILTER_KEYS = ["agent", "category", "author", "status", "age", "text"] as const;

/** The ListFeedback filters a queue URL names (status defaults to open; `status=any` lifts it). */
export function queueRequest(q: URLSearchParams, now = Date.now()): MessageInitShape<typeof ListFeedbackRequestSchema> {
  const status = q.get("status") ?? "open";
  const age = Number(q.get("age") ?? "");
  const start = age > 0 ? new Date(now - age * 86_400_000) : null;
  return {
    instance: q.get("agent") ? `instances/${q.get("agent")}` : "",
    category: q.get("category") ? categoryOf(q.get("category")!) : Category.UNSPECIFIED,
    author: Author[(q.get("author") ?? "") as keyof typeof Author] ?? Author.UNSPECIFIED,
    status: STATUS_NAMES.find(([, n]) => n === status)?.[0] ?? Status.UNSPECIFIED,
    startTime: start ? { seconds: BigInt(Math.floor(start.getTime() / 1000)), nanos: 0 } : undefined,
    text: q.get("text") ?? "",
  };
}

function filterForm(q: URLSearchParams): HTMLFormElement {
  const sel = (key: string, label: string, options: [string, string][], any = "any") =>
    h("label", {}, `${label} `, h("select", { name: key, id: `q-${key}`, "aria-label": label },
      any ? h("option", { value: "" }, any) : null,
      options.map(([v, l]) => h("option", { value: v, selected: (q.get(key) ?? (key === "status" ? "open" : "")) === v }, l))));
  const agents = [...agentNames().entries()].map(([name, display]) => [lastSegment(name), display || lastSegment(name)] as [string, string]);
  const text = h("input", { type: "search", name: "text", id: "q-text", "aria-label": "Text", placeholder: "words in the report", value: q.get("text") ?? "" });
  const form = h("form", { class: "queue-filters inline-form", role: "search" },
    sel("agent", "Agent", agents), sel("category", "Category", TAXONOMY.report_categories.map((c) => [c.category, c.label])),
    sel("author", "Reported by", AUTHORS), sel("status", "Status", [["any", "any"], ...STATUS_NAMES.map(([, n]) => [n, n] as [string, string])], ""),
    sel("age", "Age", AGES), h("label", {}, "Text ", text), h("button", { type: "submit" }, "Filter"));
  const apply = () => {
    const next = new URLSearchParams();
    for (const k of FILTER_KEYS) {
      const v = (form.elements.namedItem(k) as HTMLInputElement | HTMLSelectElement | null)?.value.trim() ?? "";
      if (v && !(k === "status" && v === "open")) next.set(k, v);
    }
    go(`#/queue${next.toString() ? `?${next}` : ""}`);
  };
  form.addEventListener("submit", (ev) => { ev.preventDefault(); apply(); });
  form.querySelectorAll("select").forEach((s) => s.addEventListener("change", apply));
  return form;
}

interface QueueState {
  items: Feedback[];
  index: number;
  selected: Set<string>;
  pageToken: string;
  stopClaim: (() => void) | null;
  held: boolean; // the open item is claimed by another session
}

export async function queuePage(main: HTMLElement, query: URLSearchParams): Promise<void> {
  await loadAgentNames();
  const state: QueueState = { items: [], index: -1, selected: new Set(), pageToken: "", stopClaim: null, held: false };
  const list = h("ol", { class: "queue-list", "aria-label": "Queue" });
  const itemBox = h("div", { class: "queue-view", "aria-live": "polite" });
  const status = h("p", { class: "queue-status", role: "status" });
  const error = h("p", { class: "error", role: "alert" });
  const more = h("button", { type: "button", class: "load-more", hidden: true }, "Load more");
  const count = h("span", { class: "muted queue-count" });
  const bulk = h("div", { class: "queue-bulk inline-form" },
    h("button", { type: "button", class: "bulk-select-all" }, "Select all"),
    h("button", { type: "button", class: "bulk-triage" }, "Mark selected triaged"),
    h("button", { type: "button", class: "bulk-dismiss" }, "Dismiss selected"),
    h("span", { class: "muted bulk-count" }, "none selected"));
  const keys = h("p", { class: "muted queue-keys" }, "Keys: ", ...[["j", "next"], ["k", "previous"], ["t", "triaged"], ["d", "dismissed"], ["o", "reopen"], ["f", "file"], ["x", "select"]]
    .flatMap(([k, what]) => [h("kbd", {}, k), ` ${what} `]));
  mount(main, h("div", { class: "page-head" }, h("h1", {}, "Review queue"), count), filterForm(query), error,
    h("div", { class: "queue-layout" }, h("div", { class: "queue-side" }, bulk, list, more), h("div", { class: "queue-main" }, keys, status, itemBox)));

  const req = queueRequest(query);
  const here = location.hash;
  const alive = () => location.hash.split("?")[0] === "#/queue" && document.body.contains(itemBox);

  const rowOf = (fb: Feedback): HTMLElement => {
    const turn = turnIndexOf(fb);
    const box = h("input", { type: "checkbox", class: "q-select", "aria-label": "Select for bulk triage", checked: state.selected.has(fb.name) });
    box.addEventListener("change", () => { box.checked ? state.selected.add(fb.name) : state.selected.delete(fb.name); bulkCount(); });
    const open = h("button", { type: "button", class: "link q-open" },
      h("span", { class: "q-agent" }, agentName(fb.instance)), turn !== null ? ` · ${turnLabel(turn)}` : "", " · ",
      h("span", { class: "q-words" }, fb.body.split("\n")[0].slice(0, 80)));
    open.addEventListener("click", () => show(state.items.findIndex((x) => x.name === fb.name)));
    return h("li", { class: "queue-row", dataset: { name: fb.name } }, box, open,
      h("span", { class: "q-badges" }, h("span", { class: `badge status-${statusName(fb.status)}` }, statusName(fb.status)),
        fb.category ? h("span", { class: "badge" }, categoryLabel(fb.category)) : null, claimBadge(fb)));
  };
  const redrawRow = (fb: Feedback) => {
    const old = list.querySelector(`li[data-name="${CSS.escape(fb.name)}"]`);
    const fresh = rowOf(fb);
    if (state.items[state.index]?.name === fb.name) fresh.classList.add("current");
    old?.replaceWith(fresh);
  };
  const bulkCount = () => { bulk.querySelector(".bulk-count")!.textContent = state.selected.size ? `${state.selected.size} selected` : "none selected"; };

  const show = async (i: number) => {
    if (i < 0 || i >= state.items.length) {
      status.textContent = i < 0 ? "This is the first item." : state.pageToken ? "Loading more…" : "End of the queue.";
      if (i >= state.items.length && state.pageToken) { await load(); if (i < state.items.length) await show(i); }
      return;
    }
    state.stopClaim?.();
    state.stopClaim = null;
    state.index = i;
    list.querySelectorAll(".queue-row.current").forEach((r) => r.classList.remove("current"));
    const row = list.querySelector<HTMLElement>(`li[data-name="${CSS.escape(state.items[i].name)}"]`);
    row?.classList.add("current");
    row?.scrollIntoView({ block: "nearest" });
    status.textContent = `Item ${i + 1} of ${state.items.length}${state.pageToken ? "+" : ""}`;
    const name = state.items[i].name;
    const got = await claim(name);
    if (state.items[state.index]?.name !== name) return; // moved on meanwhile
    let fb = state.items[i];
    if (got.ok) {
      fb = state.items[i] = got.feedback;
      state.held = false;
      state.stopClaim = holdClaim(name, alive);
    } else {
      state.held = got.held;
      if (got.held) fb = state.items[i] = await api().feedback.getFeedback({ name }).catch(() => fb);
      else status.textContent = `Not claimed: ${errorText(got.error)}`;
    }
    redrawRow(fb);
    mount(itemBox, actionBar(fb), queueItemView(fb));
    const q = new URLSearchParams(here.split("?")[1] ?? "");
    q.set("item", lastSegment(name));
    history.replaceState(null, "", `#/queue?${q}`);
  };

  const update = async (fb: Feedback, to: Status): Promise<Feedback | string> => {
    try {
      return await api().feedback.updateFeedback({ feedback: { name: fb.name, status: to, etag: fb.etag }, updateMask: { paths: ["status"] },
        requestId: uuid4(), reviewSession: reviewSession() });
    } catch (e) {
      const held = claimRefusal(e);
      if (held) return held;
      if (errorCode(e) === Code.Aborted) return "changed meanwhile";
      if (errorCode(e) === Code.FailedPrecondition) return `not allowed from ${statusName(fb.status)}`;
      return errorText(e);
    }
  };

  const triageCurrent = async (to: Status) => {
    const fb = state.items[state.index];
    if (!fb) return;
    if (state.held) { status.textContent = "Claimed by another session: pick another item."; return; }
    const r = await update(fb, to);
    if (typeof r === "string") {
      status.textContent = `Not saved (${r}).`;
      if (r === "changed meanwhile" || r.startsWith("claimed by")) await refresh(state.index);
      return;
    }
    state.items[state.index] = r;
    redrawRow(r);
    status.textContent = `Marked ${statusName(to)}.`;
    await show(state.index + 1);
    if (state.index < state.items.length) status.textContent = `Marked ${statusName(to)}. ${status.textContent}`;
  };

  const refresh = async (i: number) => {
    const fb = await api().feedback.getFeedback({ name: state.items[i].name });
    state.items[i] = fb;
    redrawRow(fb);
    if (i === state.index) {
      state.held = !!claimedByOther(fb); // e.g. our lease lapsed and another session took the item
      mount(itemBox, actionBar(fb), queueItemView(fb));
    }
  };

  const fileCurrent = async () => {
    const fb = state.items[state.index];
    if (!fb || state.held) return;
    status.textContent = "Filing…";
    try {
      const filed = await api().feedback.fileFeedback({ name: fb.name, requestId: uuid4(), reviewSession: reviewSession() });
      state.items[state.index] = filed;
      redrawRow(filed);
      mount(itemBox, actionBar(filed), queueItemView(filed));
      status.textContent = "Filed.";
    } catch (e) {
      const held = claimRefusal(e);
      status.textContent = held ? `Not filed (${held}).` : `Not filed: ${errorText(e)}. You can try again.`;
      if (held) await refresh(state.index);
    }
  };

  function actionBar(fb: Feedback): HTMLElement {
    const b = (cls: string, label: string, key: string, run: () => void, disabled = false) =>
      h("button", { type: "button", class: cls, "aria-keyshortcuts": key, disabled, onclick: run }, label, h("kbd", { "aria-hidden": "true" }, key));
    return h("div", { class: "queue-actions", role: "toolbar", "aria-label": "Review actions" },
      b("q-prev", "Previous", "k", () => void show(state.index - 1)),
      b("q-next", "Next", "j", () => void show(state.index + 1)),
      b("q-triage", "Triaged", "t", () => void triageCurrent(Status.TRIAGED), state.held || fb.status === Status.TRIAGED),
      b("q-dismiss", "Dismiss", "d", () => void triageCurrent(Status.DISMISSED), state.held || fb.status === Status.DISMISSED),
      b("q-reopen", "Reopen", "o", () => void triageCurrent(Status.OPEN), state.held || fb.status === Status.OPEN),
      b("q-file", "File issue", "f", () => void fileCurrent(), state.held || !!fb.issueUrl));
  }

  const bulkSet = async (to: Status) => {
    const picked = state.items.filter((x) => state.selected.has(x.name));
    if (!picked.length) { status.textContent = "Select items first (x, or the boxes)."; return; }
    status.textContent = `Saving ${plural(picked.length, "item")}…`;
    const results = await Promise.all(picked.map((fb) => update(fb, to)));
    let ok = 0;
    const failed: string[] = [];
    results.forEach((r) => {
      if (typeof r === "string") { failed.push(r); return; }
      ok++;
      const at = state.items.findIndex((x) => x.name === r.name);
      state.items[at] = r;
      state.selected.delete(r.name);
      redrawRow(r);
    });
    bulkCount();
    status.textContent = `${plural(ok, "item")} marked ${statusName(to)}${failed.length ? `; ${plural(failed.length, "item")} not saved (${[...new Set(failed)].join(", ")})` : ""}.`;
    const cur = state.items[state.index];
    if (cur) mount(itemBox, actionBar(cur), queueItemView(cur));
  };
  bulk.querySelector(".bulk-triage")!.addEventListener("click", () => void bulkSet(Status.TRIAGED));
  bulk.querySelector(".bulk-dismiss")!.addEventListener("click", () => void bulkSet(Status.DISMISSED));
  bulk.querySelector(".bulk-select-all")!.addEventListener("click", () => {
    for (const fb of state.items) state.selected.add(fb.name);
    list.querySelectorAll<HTMLInputElement>(".q-select").forEach((c) => (c.checked = true));
    bulkCount();
  });

  const load = async () => {
    try {
      const r = await api().feedback.listFeedback({ ...req, pageSize: 50, pageToken: state.pageToken });
      state.items.push(...r.feedback);
      list.append(...r.feedback.map(rowOf));
      state.pageToken = r.nextPageToken;
      more.hidden = !state.pageToken;
      count.textContent = `${plural(state.items.length, "item")}${state.pageToken ? " so far" : ""}`;
      if (!state.items.length) mount(itemBox, h("p", { class: "muted empty" }, "Nothing in the queue for these filters."));
    } catch (e) {
      error.textContent = errorText(e);
    }
  };
  more.addEventListener("click", () => void load());

  const onKey = (ev: KeyboardEvent) => {
    if (!alive()) { document.removeEventListener("keydown", onKey); state.stopClaim?.(); return; }
    const t = ev.target as HTMLElement | null;
    if (ev.ctrlKey || ev.metaKey || ev.altKey || (t && /^(INPUT|SELECT|TEXTAREA)$/.test(t.tagName)) || document.querySelector("dialog[open]")) return;
    const run: Record<string, () => void> = {
      j: () => void show(state.index + 1), n: () => void show(state.index + 1),
      k: () => void show(state.index - 1), p: () => void show(state.index - 1),
      t: () => void triageCurrent(Status.TRIAGED), d: () => void triageCurrent(Status.DISMISSED),
      o: () => void triageCurrent(Status.OPEN), f: () => void fileCurrent(),
      x: () => {
        const fb = state.items[state.index];
        if (!fb) return;
        state.selected.has(fb.name) ? state.selected.delete(fb.name) : state.selected.add(fb.name);
        redrawRow(fb);
        bulkCount();
      },
    };
    const f = run[ev.key];
    if (f) { ev.preventDefault(); f(); }
  };
  document.addEventListener("keydown", onKey);
  window.addEventListener("hashchange", function leave() {
    if (location.hash.split("?")[0] !== "#/queue" || !document.body.contains(itemBox)) {
      state.stopClaim?.();
      document.removeEventListener("keydown", onKey);
      window.removeEventListener("hashchange", leave);
    }
  });

  await load();
  const wanted = query.get("item");
  const at = wanted ? state.items.findIndex((x) => lastSegment(x.name) === wanted) : 0;
  if (state.items.length) await show(Math.max(0, at));
}
