// The Chat tab: the conversation and a composer streaming the reply (ChatService.StreamMessage over
// gRPC-web server streaming). Per reply, next to Copy, three controls each open the feedback modal
// (feedbackModal.ts) at its section: the whole trajectory, one like/dislike glyph (this reply; it saves
// the reaction at once, then opens the reply section), and report. The glyph lights up once any
// feedback exists for the turn (any scope, or a report): the liked half green or the disliked half red.
// The ⋯ menu holds Open the trace, Branch from here (ForkConversation) and Delete turn. After the latest
// reply a small check-in routes into the modal; it records nothing and never blocks the next message.
// Beside the conversation (below it on a phone) the workspace panels (workspacePanels.ts) show the
// workspace as of the viewed turn: the latest, or the turn of the message the owner clicked.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { api, errorText, lastSegment, uuid4 } from "../api";
import { h, mount, timeEl } from "../dom";
import { Channel, Role, type Instance, type Message, type Workspace } from "../gen/agentfeedback/chat/v1/chat_pb";
import { RatingScope, RatingSentiment } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { RatingStore, StaleWrite } from "../ratings";
import { go } from "../router";
import { turnLabel } from "../names";
import { REACTION } from "../taxonomy";
import { openFeedbackModal, type Section } from "../components/feedbackModal";
import { loadWorkspace, WorkspacePanels } from "../components/workspacePanels";

interface ChatState {
  instance: string; // instances/<id>
  id: string;
  info: Instance | null;
  messages: Message[];
  store: RatingStore;
  reported: Set<number>; // turn indexes with a report of the caller
  panels?: WorkspacePanels;
  paths: boolean; // the conversation has more than one path (a fork, or forked since)
}

const reactionKey = (turnIndex: number) => ({ turnIndex, scope: RatingScope.MESSAGE, aspect: REACTION });

export async function chatTab(panel: HTMLElement, instance: string, query: URLSearchParams, info: Instance | null = null): Promise<void> {
  const state: ChatState = { instance, id: lastSegment(instance), info, messages: [], store: new RatingStore(instance), reported: new Set(),
    paths: !!info?.forkSource };
  const log = h("section", { class: "messages", "aria-live": "polite", "aria-label": "Conversation" });
  const error = h("p", { class: "error", role: "alert" });
  const input = h("textarea", { id: "chat-input", rows: 2, placeholder: "Message the agent…", "aria-label": "Message" });
  const send = h("button", { type: "submit", class: "primary", id: "chat-send" }, "Send");
  const composer = h(
    "form",
    {
      class: "composer",
      onsubmit: async (ev: Event) => {
        ev.preventDefault();
        const content = input.value;
        if (!content.trim()) return;
        send.disabled = true;
        error.textContent = "";
        log.parentElement?.querySelector(".checkin")?.remove();
        try {
          await streamTurn(state, log, content);
          input.value = "";
        } catch (e) {
          error.textContent = errorText(e);
          await reload(state, log); // the user message is kept even when the turn failed
        } finally {
          send.disabled = false;
        }
      },
    },
    input,
    send,
  );
  const banner = info?.forkSource
    ? h("p", { class: "fork-banner" }, "Branched from ", h("a", { href: `#/agents/${encodeURIComponent(lastSegment(info.forkSource))}/chat` }, lastSegment(info.forkSource)),
        ` after ${turnLabel(info.forkTurnIndex).toLowerCase()}. Ratings marked “copy” came with the branch until you change them.`)
    : null;
  const panels = new WorkspacePanels({
    instance, store: state.store,
    openModal: (turn, section) => {
      const m = [...state.messages].reverse().find((x) => x.turnIndex === turn && x.role === Role.ASSISTANT)
        ?? state.messages.find((x) => x.turnIndex === turn);
      if (m) openModal(state, log, m, section);
    },
    onRated: (turn) => state.messages.filter((x) => x.turnIndex === turn).forEach((x) => refreshMessage(state, log, x)),
  });
  state.panels = panels;
  log.addEventListener("click", (ev) => {
    const t = ev.target as HTMLElement;
    const art = t.closest<HTMLElement>("article.msg");
    if (!art || t.closest("button, a, .menu")) return;
    void panels.show(Number(art.dataset.turn), latestTurn(state));
  });
  mount(panel, banner, h("div", { class: "chat-layout" }, h("div", { class: "chat-main" }, log, error, composer), panels.el));
  try {
    await reload(state, log);
  } catch (e) {
    error.textContent = errorText(e);
  }
  const focus = query.get("message") ?? "";
  const trace = query.get("trace") ?? "";
  const target = [...log.querySelectorAll<HTMLElement>("article.msg")].find(
    (el) => (focus && el.dataset.name === focus) || (!focus && trace && el.dataset.trace === trace),
  );
  if (target) {
    target.classList.add("focused");
    target.scrollIntoView({ block: "center" });
  }
}

async function loadReported(state: ChatState): Promise<void> {
  state.reported.clear();
  let pageToken = "";
  for (let page = 0; page < 4; page++) {
    const r = await api().feedback.listFeedback({ instance: state.instance, pageSize: 500, pageToken });
    for (const fb of r.feedback) if (fb.snapshot) state.reported.add(fb.snapshot.turnIndex);
    pageToken = r.nextPageToken;
    if (!pageToken) break;
  }
}

async function reload(state: ChatState, log: HTMLElement): Promise<void> {
  const messages: Message[] = [];
  let pageToken = "";
  do {
    const r = await api().chat.listMessages({ parent: state.instance, pageSize: 500, pageToken });
    messages.push(...r.messages);
    pageToken = r.nextPageToken;
  } while (pageToken);
  state.messages = messages;
  // Ratings and reports are decoration here: the conversation still shows without them.
  await Promise.allSettled([state.store.load(), loadReported(state), loadPaths(state)]);
  mount(log, messages.length ? messages.map((m) => messageEl(state, log, m)) : h("p", { class: "muted empty" }, "No messages yet."));
  await state.panels?.show(undefined, latestTurn(state));
}

function latestTurn(state: ChatState): number {
  return state.messages.reduce((n, m) => Math.max(n, m.turnIndex), -1);
}

/** Whether another path exists: this conversation is a fork, or one of the owner's instances was forked from it. */
async function loadPaths(state: ChatState): Promise<void> {
  if (state.info?.forkSource) { state.paths = true; return; }
  const r = await api().chat.listInstances({ pageSize: 1000 });
  state.paths = r.instances.some((i) => i.forkSource === state.instance);
}

async function streamTurn(state: ChatState, log: HTMLElement, content: string): Promise<void> {
  log.querySelector(".empty")?.remove();
  let pending: HTMLElement | null = null;
  let text = "";
  for await (const r of api().chat.streamMessage({ instance: state.instance, content, channel: Channel.TEXT, requestId: uuid4() })) {
    switch (r.event.case) {
      case "userMessage":
        state.messages.push(r.event.value);
        log.append(messageEl(state, log, r.event.value));
        pending = h("article", { class: "msg assistant streaming", "aria-busy": "true" }, h("div", { class: "msg-body" }, "…"));
        log.append(pending);
        break;
      case "replyDelta":
        text += r.event.value;
        if (pending) pending.querySelector(".msg-body")!.textContent = text;
        break;
      case "reply": {
        state.messages.push(r.event.value);
        const el = messageEl(state, log, r.event.value);
        if (pending) pending.replaceWith(el);
        else log.append(el);
        pending = null;
        log.after(checkIn(state, log, r.event.value));
        el.scrollIntoView({ block: "end" });
        void state.panels?.show(undefined, r.event.value.turnIndex); // the next turn arrived: pings start over
        break;
      }
    }
  }
  pending?.remove();
}

function turnsOf(state: ChatState): number {
  return new Set(state.messages.map((m) => m.turnIndex)).size;
}

function openModal(state: ChatState, log: HTMLElement, m: Message, section: Section): void {
  const shown = state.panels?.workspace;
  if (shown && shown.turnIndex === m.turnIndex) { openModalWith(state, log, m, section, shown); return; }
  // The workspace as of the turn decides which component questions apply; the modal opens without it on failure.
  loadWorkspace(state.instance, m.turnIndex).then((ws) => openModalWith(state, log, m, section, ws), () => openModalWith(state, log, m, section, null));
}

function openModalWith(state: ChatState, log: HTMLElement, m: Message, section: Section, workspace: Workspace | null): void {
  const status = log.querySelector(`article.msg[data-name="${CSS.escape(m.name)}"] .msg-status`);
  openFeedbackModal({
    instance: state.instance, message: m, turns: turnsOf(state), forked: !!state.info?.forkSource, artifacts: [],
    workspace, paths: state.paths,
    store: state.store,
    onChange: () => { dropCheckIn(log); refreshMessage(state, log, m); state.panels?.render(); },
    onReported: (name) => {
      dropCheckIn(log);
      state.reported.add(m.turnIndex);
      const fresh = refreshMessage(state, log, m);
      mount(fresh?.querySelector(".msg-status") ?? status ?? h("p"), "Reported. ", h("a", { href: `#/feedback?highlight=${encodeURIComponent(name)}` }, "See it on the Feedback page"), ".");
    },
  }, section);
}

/** The check-in asks for feedback: once any was given on this page it has done its job. */
function dropCheckIn(log: HTMLElement): void {
  log.parentElement?.querySelector(".checkin")?.remove();
}

/** After the latest reply: a check-in that routes into the modal. Records nothing; dismissable; gone
 *  once the owner gives any feedback (a rating from the glyph or the modal, or a report). */
function checkIn(state: ChatState, log: HTMLElement, m: Message): HTMLElement {
  log.parentElement?.querySelector(".checkin")?.remove();
  const box = h("aside", { class: "checkin", "aria-label": "Check-in" });
  const btn = (label: string, section: Section, cls: string) => {
    const b = h("button", { type: "button", class: cls }, label);
    b.addEventListener("click", () => { box.remove(); openModal(state, log, m, section); });
    return b;
  };
  const dismiss = h("button", { type: "button", class: "checkin-dismiss", "aria-label": "Dismiss the check-in" }, "Not now");
  dismiss.addEventListener("click", () => box.remove());
  mount(box, h("span", {}, "How is it going?"), btn("Rate this reply", "reply", "checkin-reply"), btn("The task so far", "trajectory", "checkin-trajectory"), dismiss);
  return box;
}

function refreshMessage(state: ChatState, log: HTMLElement, m: Message): HTMLElement | null {
  const old = log.querySelector(`article.msg[data-name="${CSS.escape(m.name)}"]`);
  if (!old) return null;
  const fresh = messageEl(state, log, m);
  old.replaceWith(fresh);
  return fresh;
}

function roleName(m: Message): string {
  return m.role === Role.ASSISTANT ? "agent" : "you";
}

/** like / dislike / feedback (any other rating or a report) / none, and whether it is an unedited copy. */
function glyphState(state: ChatState, turnIndex: number): { lit: string; copy: boolean } {
  const reaction = state.store.get(reactionKey(turnIndex));
  const any = state.store.forTurn(turnIndex);
  const lit = reaction?.sentiment === RatingSentiment.POSITIVE ? "like"
    : reaction?.sentiment === RatingSentiment.NEGATIVE ? "dislike"
    : any.length || state.reported.has(turnIndex) ? "feedback" : "none";
  return { lit, copy: any.length > 0 && any.every((r) => RatingStore.isCopy(r)) };
}

function glyph(state: ChatState, log: HTMLElement, m: Message, status: HTMLElement): HTMLElement {
  const { lit, copy } = glyphState(state, m.turnIndex);
  const half = (key: "like" | "dislike", sentiment: RatingSentiment, label: string, sign: string) => {
    const b = h("button", {
      type: "button", class: `act half act-${key}`, title: label, "aria-label": label, "aria-pressed": String(lit === key),
    }, h("span", { "aria-hidden": "true", class: "glyph" }, sign), h("span", { class: "act-text act-short", "aria-hidden": "true" }, label));
    b.addEventListener("click", () => void react(state, log, m, sentiment, status));
    return b;
  };
  return h("span", {
    class: `glyph-pair lit-${lit}${copy ? " copy" : ""}`, role: "group", "aria-label": "This reply: like or dislike",
    dataset: { lit }, title: copy ? "Copied with the branch; change it to make it yours" : undefined,
  }, half("like", RatingSentiment.POSITIVE, "Like", "▲"), half("dislike", RatingSentiment.NEGATIVE, "Dislike", "▼"));
}

function messageEl(state: ChatState, log: HTMLElement, m: Message): HTMLElement {
  const assistant = m.role === Role.ASSISTANT;
  const el = h("article", {
    class: `msg ${assistant ? "assistant" : "user"}`,
    dataset: { name: m.name, trace: m.traceId, turn: String(m.turnIndex) },
  });
  const status = h("p", { class: "msg-status", role: "status" });
  // At narrow widths a control shows its glyph over a short label (touch has no hover to explain it).
  const button = (key: string, label: string, sign: string, run: () => void, short = label) => {
    const b = h("button", { type: "button", class: `act act-${key}`, title: label, "aria-label": label },
      sign ? h("span", { "aria-hidden": "true", class: "glyph" }, sign) : null,
      sign ? h("span", { class: "act-text act-long", "aria-hidden": "true" }, label) : h("span", {}, label),
      sign ? h("span", { class: "act-text act-short", "aria-hidden": "true" }, short) : null);
    b.addEventListener("click", run);
    return b;
  };
  const copy = button("copy", "Copy", "", () => void copyText(m.content).then(() => { status.textContent = "Copied."; }));
  const controls: HTMLElement[] = [copy];
  if (assistant) {
    controls.push(
      button("trajectory", "Whole trajectory", "⤳", () => openModal(state, log, m, "trajectory"), "Task"),
      glyph(state, log, m, status),
      button("report", "Report a problem", "⚑", () => openModal(state, log, m, "report"), "Report"),
    );
  }
  const menuItems: [string, string, () => void][] = [
    ["trace", "Open the trace", () => { location.hash = `#/agents/${encodeURIComponent(state.id)}/trace?trace=${m.traceId}`; }],
    ["branch", "Branch from here", () => void branch(state, m, status)],
    ["delete", "Delete turn", () => void deleteTurn(state, log, m, status)],
  ];
  const menu = h("div", { class: "menu", role: "menu", hidden: true });
  const more = h("button", { type: "button", class: "act more", "aria-haspopup": "menu", "aria-expanded": "false", "aria-label": "More actions", title: "More actions" },
    h("span", { class: "glyph", "aria-hidden": "true" }, "⋯"), h("span", { class: "act-text act-short", "aria-hidden": "true" }, "More"));
  const closeMenu = () => { menu.hidden = true; more.setAttribute("aria-expanded", "false"); };
  more.addEventListener("click", () => {
    const open = menu.hidden;
    document.querySelectorAll<HTMLElement>(".menu").forEach((x) => (x.hidden = true));
    menu.hidden = !open;
    more.setAttribute("aria-expanded", String(open));
  });
  mount(menu, menuItems.map(([key, label, run]) => {
    const b = h("button", { type: "button", role: "menuitem", class: `menu-item act-${key}` }, label);
    b.addEventListener("click", () => { closeMenu(); run(); });
    return b;
  }));
  const lit = assistant ? glyphState(state, m.turnIndex).lit : "none";
  el.append(
    h("header", { class: "msg-head" }, h("span", { class: "msg-role" }, roleName(m)), h("span", { class: "msg-time" }, timeEl(m.createTime ? timestampDate(m.createTime) : undefined)),
      m.sourceMessage ? h("span", { class: "badge copy", title: `Copied from ${m.sourceMessage}` }, "from the original") : null),
    h("div", { class: "msg-body" }, m.content),
    h("footer", { class: `msg-foot${lit !== "none" ? " has-feedback" : ""}` },
      h("div", { class: "actions", role: "toolbar", "aria-label": `Actions for this ${roleName(m)} message` }, controls, more)),
    menu,
    status,
  );
  return el;
}

async function copyText(text: string): Promise<void> {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const ta = h("textarea", { class: "offscreen" }, text);
    document.body.append(ta);
    ta.select();
    document.execCommand("copy");
    ta.remove();
  }
}

/** Like / dislike: saved at once (the reaction's sentiment only), then the reply section opens so a
 *  reason can follow. Pressing the lit half again clears the reaction (and opens nothing). */
async function react(state: ChatState, log: HTMLElement, m: Message, sentiment: RatingSentiment, status: HTMLElement): Promise<void> {
  const key = reactionKey(m.turnIndex);
  try {
    if (state.store.get(key)?.sentiment === sentiment) {
      await state.store.remove(key);
      refreshMessage(state, log, m);
      return;
    }
    await state.store.put(key, { sentiment }, ["sentiment"]);
    dropCheckIn(log);
  } catch (e) {
    if (!(e instanceof StaleWrite)) {
      status.textContent = errorText(e);
      return;
    }
    // Changed elsewhere meanwhile: the owner just pressed this half, so apply it to the current rating.
    try {
      await state.store.put(key, { sentiment }, ["sentiment"]);
    } catch (again) {
      status.textContent = errorText(again);
      return;
    }
  }
  refreshMessage(state, log, m);
  openModal(state, log, m, "reply");
}

async function branch(state: ChatState, m: Message, status: HTMLElement): Promise<void> {
  status.textContent = "Branching…";
  try {
    const r = await api().chat.forkConversation({ parent: state.instance, turnIndex: m.turnIndex, requestId: uuid4() });
    go(`#/agents/${encodeURIComponent(lastSegment(r.instance?.name ?? ""))}/chat`);
  } catch (e) {
    status.textContent = errorText(e);
  }
}

async function deleteTurn(state: ChatState, log: HTMLElement, m: Message, status: HTMLElement): Promise<void> {
  if (status.dataset.confirm !== m.traceId) {
    status.dataset.confirm = m.traceId;
    mount(status, "Delete both messages of this turn? Your ratings of it are deleted too; your reports of it are kept (marked as of a deleted turn). ",
      h("button", { type: "button", class: "danger confirm-delete", onclick: () => void deleteTurn(state, log, m, status) }, "Delete turn"));
    return;
  }
  try {
    await api().chat.deleteTurn({ parent: state.instance, traceId: m.traceId });
    await reload(state, log);
  } catch (e) {
    status.textContent = errorText(e);
  }
}
