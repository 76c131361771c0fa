// The review queue (#/queue): the caller's reports and negative judgements that need a look, filtered on
// the server (reports: ListFeedback — agent, category, author kind, status, age, text; judgements:
// ListRatings over every conversation — NEGATIVE, the owner's own, agent, reason, age) with the filters
// kept in the URL, and worked through one at a time (components/queueItem.ts) with the keyboard:
//   j / n  next        k / p  previous      t  triaged      d  dismissed      o  reopen      f  file
//   x      select the open item for bulk triage
// The open item is claimed for this tab (claims.ts: a lease held by the feedback service, renewed while
// open, released on leaving), so another session sees it as claimed and does not work it too.
// The list is strictly newest first across "Load more" pages (reports by create time, judgements by update
// time; newestFirst.ts): an item shows only once neither list can still hold a newer one.
// On a phone (<= 720 px, style.css) the page is one column in the desktop's reading order: filters, bulk
// bar, the list, then the open item. The item is drawn after the queue loads and grows as its
// conversation, evidence and trace arrive, so nothing a finger aims at may sit below it: the list comes
// first and keeps its place. Opening an item (a row, Previous / Next, a key) brings the item's top into
// view instead of scrolling the page to its row, and the item's "List" control goes back to the row.
import { api, Code, errorCode, errorText, lastSegment, uuid4 } from "../api";
import { claim, claimedByOther, claimRefusal, holdClaim, reviewSession } from "../claims";
import { h, iso, mount } from "../dom";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  Author, Category, ListFeedbackRequestSchema, ListRatingsRequestSchema, RatingOrigin, RatingSentiment, Status, type Feedback, type Rating,
} from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { agentName, agentNames, aspectLabel, loadAgentNames, plural, STATUS_NAMES, statusName, turnLabel } from "../names";
import { go } from "../router";
import { allReasons, categoryLabel, categoryOf, labelOf, TAXONOMY } from "../taxonomy";
import { claimBadge, judgementItemView, queueItemView, turnIndexOf, turnRemovedBadge } from "../components/queueItem";
import { NewestFirst, positionOf } from "../newestFirst";

const AGES: [string, string][] = [["1", "last day"], ["7", "last 7 days"], ["30", "last 30 days"], ["90", "last 90 days"]];
const AUTHORS: [string, string][] = [["USER", "the owner"], ["AGENT", "the agent"], ["PLATFORM", "the platform"]];
const KINDS: [string, string][] = [["reports", "reports"], ["judgements", "negative judgements"]];
const FILTER_KEYS = ["kind", "agent", "category", "reason", "author", "status", "age", "text"] as const;
const PAGE = 50;
// One agent's judgements come by turn, not by time (ListRatings on one conversation): they are all read
// (at most this many pages) and put in time order before merging.
const MAX_CONVERSATION_PAGES = 20;
const REPORTS = 0, JUDGEMENTS = 1; // the merge's sources; at the same time a report comes first
/** The one-column layout (style.css: the list above the open item, both part of the page's scroll). */
const onPhone = () => matchMedia("(max-width: 720px)").matches;

function ageStart(q: URLSearchParams, now: number) {
  const age = Number(q.get("age") ?? "");
  return age > 0 ? { seconds: BigInt(Math.floor((now - age * 86_400_000) / 1000)), nanos: 0 } : undefined;
}

/** The ListFeedback filters a queue URL names (status defaults to open; `status=any` lifts it), or null
 * when the URL asks for judgements only (`kind=judgements`, or a `reason`: reports carry no reasons). */
export function queueRequest(q: URLSearchParams, now = Date.now()): MessageInitShape<typeof ListFeedbackRequestSchema> | null {
  if (q.get("kind") === "judgements" || q.get("reason")) return null;
  const status = q.get("status") ?? "open";
  return {
    instance: q.get("agent") ? `instances/${q.get("agent")}` : "",
    category: q.get("category") ? categoryOf(q.get("category")!) : Category.UNSPECIFIED,
    author: Author[(q.get("author") ?? "") as keyof typeof Author] ?? Author.UNSPECIFIED,
    status: STATUS_NAMES.find(([, n]) => n === status)?.[0] ?? Status.UNSPECIFIED,
    startTime: ageStart(q, now),
    text: q.get("text") ?? "",
  };
}

/** The ListRatings request for the queue's negative judgements (the owner's own, every conversation or
 * the agent's), or null when the URL's filters exclude judgements: `kind=reports`, an author other than
 * the owner, a report category, a text, or a triage status other than open (judgements have none). */
export function judgementRequest(q: URLSearchParams, now = Date.now()): MessageInitShape<typeof ListRatingsRequestSchema> | null {
  const status = q.get("status") ?? "open";
  const author = q.get("author") ?? "";
  if (q.get("kind") === "reports" || (author && author !== "USER") || q.get("category") || q.get("text") || !["open", "any"].includes(status)) return null;
  return {
    conversation: q.get("agent") ? `instances/${q.get("agent")}` : "instances/-",
    sentiment: RatingSentiment.NEGATIVE, origin: RatingOrigin.USER, reason: q.get("reason") ?? "", startTime: ageStart(q, now),
  };
}

/** One queue item: a report (triaged, claimed, filed) or a negative judgement (looked at, not triaged). */
export type QueueItem = { kind: "report"; fb: Feedback } | { kind: "judgement"; r: Rating };
const nameOf = (it: QueueItem) => (it.kind === "report" ? it.fb.name : it.r.name);
const timeOf = (it: QueueItem) => (it.kind === "report" ? it.fb.createTime : it.r.updateTime);

function filterForm(q: URLSearchParams): HTMLFormElement {
  const sel = (key: string, label: string, options: [string, string][], any = "any") =>
    h("label", {}, `${label} `, h("select", { name: key, id: `q-${key}`, "aria-label": label },
      any ? h("option", { value: "" }, any) : null,
      options.map(([v, l]) => h("option", { value: v, selected: (q.get(key) ?? (key === "status" ? "open" : "")) === v }, l))));
  const agents = [...agentNames().entries()].map(([name, display]) => [lastSegment(name), display || lastSegment(name)] as [string, string]);
  const text = h("input", { type: "search", name: "text", id: "q-text", "aria-label": "Text", placeholder: "words in the report", value: q.get("text") ?? "" });
  const form = h("form", { class: "queue-filters inline-form", role: "search" },
    sel("kind", "Kind", KINDS, "reports and judgements"),
    sel("agent", "Agent", agents), sel("category", "Category", TAXONOMY.report_categories.map((c) => [c.category, c.label])),
    sel("reason", "Reason", allReasons().map((r) => [r.slug, r.label])),
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
  items: QueueItem[];
  index: number;
  selected: Set<string>; // reports picked for bulk triage
  reportToken: string; // next ListFeedback page ("" = first)
  ratingToken: string; // the same for ListRatings
  stopClaim: (() => void) | null;
  held: boolean; // the open item is claimed by another session
}

export async function queuePage(main: HTMLElement, query: URLSearchParams): Promise<void> {
  await loadAgentNames();
  const req = queueRequest(query);
  const jreq = judgementRequest(query);
  const state: QueueState = { items: [], index: -1, selected: new Set(), reportToken: "", ratingToken: "", stopClaim: null, held: false };
  const merge = new NewestFirst<QueueItem>(2, (it, source) => positionOf(timeOf(it), source),
    [...(req ? [] : [REPORTS]), ...(jreq ? [] : [JUDGEMENTS])]);
  const more = () => !merge.done();
  const list = h("ol", { class: "queue-list", "aria-label": "Queue" });
  const itemBox = h("div", { class: "queue-view", "aria-live": "polite" });
  const status = h("p", { class: "queue-status", role: "status" });
  const error = h("p", { class: "error", role: "alert" });
  const moreButton = h("button", { type: "button", class: "load-more", hidden: true }, "Load more");
  const count = h("span", { class: "muted queue-count" });
  const capped = h("p", { class: "muted queue-capped", hidden: true });
  const bulk = h("div", { class: "queue-bulk inline-form" },
    h("button", { type: "button", class: "bulk-select-all" }, "Select all"),
    h("button", { type: "button", class: "bulk-triage" }, "Mark selected triaged"),
    h("button", { type: "button", class: "bulk-dismiss" }, "Dismiss selected"),
    h("span", { class: "muted bulk-count" }, "none selected"));
  const keys = h("p", { class: "muted queue-keys" }, "Keys: ", ...[["j", "next"], ["k", "previous"], ["t", "triaged"], ["d", "dismissed"], ["o", "reopen"], ["f", "file"], ["x", "select"]]
    .flatMap(([k, what]) => [h("kbd", {}, k), ` ${what} `]));
  const itemColumn = h("div", { class: "queue-main" }, keys, status, itemBox);
  mount(main, h("div", { class: "page-head" }, h("h1", {}, "Review queue"), count), filterForm(query), error,
    h("div", { class: "queue-layout" }, h("div", { class: "queue-side" }, bulk, list, capped, moreButton), itemColumn));

  const here = location.hash;
  // The address this page last wrote: a show() finishing after the user went elsewhere (another filter,
  // another page; its claim call answered late) must not write its item into the new address, which the
  // router may not have read yet, and so reopen the old filter.
  let written = here;
  const setItemInUrl = (q: URLSearchParams) => {
    if (!document.body.contains(itemBox) || location.hash !== written) return;
    history.replaceState(null, "", `#/queue?${q}`);
    written = location.hash; // as the browser keeps it (compared as such next time)
  };
  const alive = () => location.hash.split("?")[0] === "#/queue" && document.body.contains(itemBox);
  const reportAt = (i: number): Feedback | null => { const it = state.items[i]; return it?.kind === "report" ? it.fb : null; };
  const indexOf = (name: string) => state.items.findIndex((x) => nameOf(x) === name);

  const rowOf = (it: QueueItem): HTMLElement => {
    const name = nameOf(it);
    const open = (...content: (Node | string | null)[]) => {
      const b = h("button", { type: "button", class: "link q-open" }, ...content);
      b.addEventListener("click", () => void show(indexOf(name), true));
      return b;
    };
    if (it.kind === "judgement") {
      const r = it.r;
      return h("li", { class: "queue-row judgement-row", dataset: { name, kind: "judgement" } },
        h("span", { class: "q-select-none", "aria-hidden": "true" }),
        open(h("span", { class: "q-agent" }, agentName(r.conversation)), ` · ${turnLabel(r.turnIndex)} · `,
          h("span", { class: "q-words" }, aspectLabel(r.aspect), r.choice ? `: ${labelOf(r.choice)}` : "")),
        h("span", { class: "q-badges" }, h("span", { class: "badge judgement-kind" }, "judgement"),
          ...r.reasons.map((x) => h("span", { class: "badge reason-badge" }, labelOf(x)))));
    }
    const fb = it.fb;
    const turn = turnIndexOf(fb);
    const box = h("input", { type: "checkbox", class: "q-select", "aria-label": "Select for bulk triage", checked: state.selected.has(fb.name) });
    box.addEventListener("change", () => { box.checked ? state.selected.add(fb.name) : state.selected.delete(fb.name); bulkCount(); });
    return h("li", { class: "queue-row", dataset: { name, kind: "report" } }, box,
      open(h("span", { class: "q-agent" }, agentName(fb.instance)), turn !== null ? ` · ${turnLabel(turn)}` : "", " · ",
        iso(fb.body.split("\n")[0].slice(0, 80), { class: "q-words" })),
      h("span", { class: "q-badges" }, h("span", { class: `badge status-${statusName(fb.status)}` }, statusName(fb.status)),
        fb.category ? h("span", { class: "badge" }, categoryLabel(fb.category)) : null, turnRemovedBadge(fb), claimBadge(fb)));
  };
  const redrawRow = (fb: Feedback) => {
    const old = list.querySelector(`li[data-name="${CSS.escape(fb.name)}"]`);
    const fresh = rowOf({ kind: "report", fb });
    if (state.index >= 0 && state.items[state.index] && nameOf(state.items[state.index]) === fb.name) fresh.classList.add("current");
    old?.replaceWith(fresh);
  };
  const setReport = (i: number, fb: Feedback) => { state.items[i] = { kind: "report", fb }; redrawRow(fb); };
  const bulkCount = () => { bulk.querySelector(".bulk-count")!.textContent = state.selected.size ? `${state.selected.size} selected` : "none selected"; };
  const view = (it: QueueItem) => (it.kind === "report" ? [actionBar(it), queueItemView(it.fb)] : [actionBar(it), judgementItemView(it.r)]);

  // `reveal`: the reader asked for this item (a row, Previous / Next, a key), so on a phone its top is
  // brought into view (it lies below the list there); on a desktop the list scrolls to its row instead.
  const show = async (i: number, reveal = false) => {
    if (i < 0 || i >= state.items.length) {
      status.textContent = i < 0 ? "This is the first item." : more() ? "Loading more…" : "End of the queue.";
      if (i >= state.items.length && more()) { await load(); if (i < state.items.length) await show(i, reveal); }
      return;
    }
    state.stopClaim?.();
    state.stopClaim = null;
    state.held = false;
    state.index = i;
    const name = nameOf(state.items[i]);
    list.querySelectorAll(".queue-row.current").forEach((r) => r.classList.remove("current"));
    const row = list.querySelector<HTMLElement>(`li[data-name="${CSS.escape(name)}"]`);
    row?.classList.add("current");
    if (!onPhone()) row?.scrollIntoView({ block: "nearest" });
    else if (reveal) itemColumn.scrollIntoView({ block: "start" });
    status.textContent = `Item ${i + 1} of ${state.items.length}${more() ? "+" : ""}`;
    const q = new URLSearchParams(here.split("?")[1] ?? "");
    q.set("item", lastSegment(name));
    if (state.items[i].kind === "judgement") { // a judgement is looked at, not claimed or triaged
      mount(itemBox, ...view(state.items[i]));
      setItemInUrl(q);
      return;
    }
    const got = await claim(name);
    if (nameOf(state.items[state.index] ?? state.items[i]) !== name) return; // moved on meanwhile
    let fb = reportAt(i)!;
    if (got.ok) {
      fb = got.feedback;
      state.stopClaim = holdClaim(name, alive);
    } else {
      state.held = got.held;
      if (got.held) fb = await api().feedback.getFeedback({ name }).catch(() => fb);
      else status.textContent = `Not claimed: ${errorText(got.error)}`;
    }
    setReport(i, fb);
    mount(itemBox, ...view(state.items[i]));
    setItemInUrl(q);
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
  const notAReport = () => { status.textContent = "A judgement has no triage state: to file it, report the turn from its conversation."; };

  const triageCurrent = async (to: Status) => {
    const fb = reportAt(state.index);
    if (!fb) { if (state.items[state.index]) notAReport(); return; }
    if (state.held) { status.textContent = "Claimed by another session: pick another item."; return; }
    const r = await update(fb, to);
    if (typeof r === "string") {
      status.textContent = `Not saved (${r}).`;
      if (r === "changed meanwhile" || r.startsWith("claimed by")) await refresh(state.index);
      return;
    }
    setReport(state.index, r);
    status.textContent = `Marked ${statusName(to)}.`;
    await show(state.index + 1, true);
    if (state.index < state.items.length) status.textContent = `Marked ${statusName(to)}. ${status.textContent}`;
  };

  const refresh = async (i: number) => {
    const cur = reportAt(i);
    if (!cur) return;
    const fb = await api().feedback.getFeedback({ name: cur.name });
    setReport(i, fb);
    if (i === state.index) {
      state.held = !!claimedByOther(fb); // e.g. our lease lapsed and another session took the item
      mount(itemBox, ...view(state.items[i]));
    }
  };

  const fileCurrent = async () => {
    const fb = reportAt(state.index);
    if (!fb) { if (state.items[state.index]) notAReport(); return; }
    if (state.held) return;
    status.textContent = "Filing…";
    try {
      const filed = await api().feedback.fileFeedback({ name: fb.name, requestId: uuid4(), reviewSession: reviewSession() });
      setReport(state.index, filed);
      mount(itemBox, ...view(state.items[state.index]));
      status.textContent = "Filed.";
    } catch (e) {
      const held = claimRefusal(e);
      status.textContent = held ? `Not filed (${held}).` : `Not filed: ${errorText(e)}. You can try again.`;
      if (held) await refresh(state.index);
    }
  };

  // On a phone: back up to the open item's row in the list (its button focused, as a tap would leave it).
  const backToList = () => {
    const row = list.querySelector<HTMLElement>(".queue-row.current");
    if (!row) { list.scrollIntoView({ block: "start" }); return; }
    row.scrollIntoView({ block: "center" });
    row.querySelector<HTMLElement>(".q-open")?.focus({ preventScroll: true });
  };

  function actionBar(it: QueueItem): HTMLElement {
    const b = (cls: string, label: string, key: string, run: () => void, disabled = false) =>
      h("button", { type: "button", class: cls, "aria-keyshortcuts": key, disabled, onclick: run }, label, h("kbd", { "aria-hidden": "true" }, key));
    const fb = it.kind === "report" ? it.fb : null;
    const off = state.held || !fb;
    return h("div", { class: "queue-actions", role: "toolbar", "aria-label": "Review actions" },
      h("button", { type: "button", class: "q-to-list", "aria-label": "Back to the list", onclick: backToList }, "↑ List"),
      b("q-prev", "Previous", "k", () => void show(state.index - 1, true)),
      b("q-next", "Next", "j", () => void show(state.index + 1, true)),
      b("q-triage", "Triaged", "t", () => void triageCurrent(Status.TRIAGED), off || fb?.status === Status.TRIAGED),
      b("q-dismiss", "Dismiss", "d", () => void triageCurrent(Status.DISMISSED), off || fb?.status === Status.DISMISSED),
      b("q-reopen", "Reopen", "o", () => void triageCurrent(Status.OPEN), off || fb?.status === Status.OPEN),
      b("q-file", "File issue", "f", () => void fileCurrent(), off || !!fb?.issueUrl),
      fb ? null : h("span", { class: "muted q-judgement-note" }, "A judgement is looked at, not triaged."));
  }

  const bulkSet = async (to: Status) => {
    const picked = state.items.flatMap((x) => (x.kind === "report" && state.selected.has(x.fb.name) ? [x.fb] : []));
    if (!picked.length) { status.textContent = "Select items first (x, or the boxes)."; return; }
    status.textContent = `Saving ${plural(picked.length, "item")}…`;
    const results = await Promise.all(picked.map((fb) => update(fb, to)));
    let ok = 0;
    const failed: string[] = [];
    results.forEach((r) => {
      if (typeof r === "string") { failed.push(r); return; }
      ok++;
      state.selected.delete(r.name);
      setReport(indexOf(r.name), r);
    });
    bulkCount();
    status.textContent = `${plural(ok, "item")} marked ${statusName(to)}${failed.length ? `; ${plural(failed.length, "item")} not saved (${[...new Set(failed)].join(", ")})` : ""}.`;
    const cur = state.items[state.index];
    if (cur) mount(itemBox, ...view(cur));
  };
  bulk.querySelector(".bulk-triage")!.addEventListener("click", () => void bulkSet(Status.TRIAGED));
  bulk.querySelector(".bulk-dismiss")!.addEventListener("click", () => void bulkSet(Status.DISMISSED));
  bulk.querySelector(".bulk-select-all")!.addEventListener("click", () => {
    for (const it of state.items) if (it.kind === "report") state.selected.add(it.fb.name);
    list.querySelectorAll<HTMLInputElement>(".q-select").forEach((c) => (c.checked = true));
    bulkCount();
  });

  // One page of `source` (one agent's judgements: all of them, then put newest first).
  const read = async (source: number) => {
    if (source === REPORTS && req) {
      const r = await api().feedback.listFeedback({ ...req, pageSize: PAGE, pageToken: state.reportToken });
      state.reportToken = r.nextPageToken;
      merge.add(REPORTS, r.feedback.map((fb): QueueItem => ({ kind: "report", fb })), !r.nextPageToken);
    } else if (source === JUDGEMENTS && jreq) {
      const got: Rating[] = [];
      const everyAgent = jreq.conversation === "instances/-";
      for (let page = 0; page < (everyAgent ? 1 : MAX_CONVERSATION_PAGES); page++) {
        const r = await api().feedback.listRatings({ ...jreq, pageSize: PAGE, pageToken: state.ratingToken });
        got.push(...r.ratings);
        state.ratingToken = r.nextPageToken;
        if (!r.nextPageToken) break;
      }
      if (!everyAgent) {
        const ms = (r: Rating) => (r.updateTime ? Number(r.updateTime.seconds) * 1000 + r.updateTime.nanos / 1e6 : 0);
        got.sort((a, b) => ms(b) - ms(a));
        capped.hidden = !state.ratingToken;
        capped.textContent = `Only the first ${plural(got.length, "judgement")} of this agent are here; narrow the filters for the others.`;
      }
      merge.add(JUDGEMENTS, got.map((r): QueueItem => ({ kind: "judgement", r })), everyAgent ? !state.ratingToken : true);
    }
  };
  // Read what the merge waits on until something can be shown (or nothing is left); one read at a time
  // (Load more and j past the end may ask together).
  let loading: Promise<void> | null = null;
  const load = () => (loading ??= loadNext().finally(() => { loading = null; }));
  const loadNext = async () => {
    try {
      let batch: QueueItem[] = [];
      while (!batch.length && !merge.done()) {
        await Promise.all(merge.waiting().map(read));
        batch = merge.take();
      }
      state.items.push(...batch);
      list.append(...batch.map(rowOf));
      moreButton.hidden = !more();
      count.textContent = `${plural(state.items.length, "item")}${more() ? " so far" : ""}`;
      if (!state.items.length) mount(itemBox, h("p", { class: "muted empty" }, "Nothing in the queue for these filters."));
    } catch (e) {
      error.textContent = errorText(e);
    }
  };
  moreButton.addEventListener("click", () => void load());

  const onKey = (ev: KeyboardEvent) => {
    if (!alive()) { document.removeEventListener("keydown", onKey); state.stopClaim?.(); return; }
    const t = ev.target as HTMLElement | null;
    if (ev.ctrlKey || ev.metaKey || ev.altKey || (t && /^(INPUT|SELECT|TEXTAREA)$/.test(t.tagName)) || document.querySelector("dialog[open]")) return;
    const run: Record<string, () => void> = {
      j: () => void show(state.index + 1, true), n: () => void show(state.index + 1, true),
      k: () => void show(state.index - 1, true), p: () => void show(state.index - 1, true),
      t: () => void triageCurrent(Status.TRIAGED), d: () => void triageCurrent(Status.DISMISSED),
      o: () => void triageCurrent(Status.OPEN), f: () => void fileCurrent(),
      x: () => {
        const fb = reportAt(state.index);
        if (!fb) { if (state.items[state.index]) notAReport(); return; }
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
  const at = wanted ? state.items.findIndex((x) => lastSegment(nameOf(x)) === wanted) : 0;
  // An item the address names (a link, a reload) is shown; otherwise the list is what a phone shows first.
  if (state.items.length) await show(Math.max(0, at), !!wanted && at >= 0);
}
