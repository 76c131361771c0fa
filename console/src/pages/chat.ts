// The Chat tab: the conversation, a composer streaming the reply (ChatService.StreamMessage over
// gRPC-web server streaming), and per message: copy, delete turn, like/dislike (PutRating, aspect
// `reaction`, MESSAGE scope), open the trace, and "report a problem" (CreateFeedback with the
// owner's words). At narrow widths the actions collapse into one overflow menu (style.css).
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { api, Code, errorCode, errorText, lastSegment, uuid4 } from "../api";
import { h, mount, timeEl } from "../dom";
import { Channel, Role, type Message } from "../gen/agentfeedback/chat/v1/chat_pb";
import { RatingScope, RatingSentiment, Sentiment, Surface, type Rating } from "../gen/agentfeedback/feedback/v1/feedback_pb";

const REACTION = "reaction";
/** The feedback service's limit (feedback.proto: body ≤ 4000 characters); shown, never enforced by clipping. */
const BODY_LIMIT = 4000;

interface ChatState {
  instance: string; // instances/<id>
  id: string;
  messages: Message[];
  reactions: Map<number, Rating>; // turn_index → the caller's `reaction` rating
}

export async function chatTab(panel: HTMLElement, instance: string, query: URLSearchParams): Promise<void> {
  const state: ChatState = { instance, id: lastSegment(instance), messages: [], reactions: new Map() };
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
  mount(panel, log, error, composer);
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

async function reload(state: ChatState, log: HTMLElement): Promise<void> {
  const messages: Message[] = [];
  let pageToken = "";
  do {
    const r = await api().chat.listMessages({ parent: state.instance, pageSize: 500, pageToken });
    messages.push(...r.messages);
    pageToken = r.nextPageToken;
  } while (pageToken);
  state.messages = messages;
  state.reactions.clear();
  try {
    let tok = "";
    do {
      const r = await api().feedback.listRatings({ conversation: state.instance, pageSize: 500, pageToken: tok });
      for (const rt of r.ratings) if (rt.scope === RatingScope.MESSAGE && rt.aspect === REACTION) state.reactions.set(rt.turnIndex, rt);
      tok = r.nextPageToken;
    } while (tok);
  } catch {
    // Ratings are decoration here: the conversation still shows without them.
  }
  mount(log, messages.length ? messages.map((m) => messageEl(state, log, m)) : h("p", { class: "muted empty" }, "No messages yet."));
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
        el.scrollIntoView({ block: "end" });
        break;
      }
    }
  }
  pending?.remove();
}

function roleName(m: Message): string {
  return m.role === Role.ASSISTANT ? "agent" : "you";
}

function messageEl(state: ChatState, log: HTMLElement, m: Message): HTMLElement {
  const assistant = m.role === Role.ASSISTANT;
  const el = h("article", {
    class: `msg ${assistant ? "assistant" : "user"}`,
    dataset: { name: m.name, trace: m.traceId, turn: String(m.turnIndex) },
  });
  const status = h("p", { class: "msg-status", role: "status" });
  const reportSlot = h("div", { class: "report-slot" });
  const reaction = state.reactions.get(m.turnIndex);

  const actions: { key: string; label: string; glyph: string; pressed?: boolean; run: () => Promise<void> | void }[] = [
    {
      key: "copy", label: "Copy", glyph: "",
      run: async () => {
        await copyText(m.content);
        status.textContent = "Copied.";
      },
    },
  ];
  if (assistant) {
    actions.push(
      { key: "like", label: "Like", glyph: "▲", pressed: reaction?.sentiment === RatingSentiment.POSITIVE, run: () => react(state, log, m, RatingSentiment.POSITIVE, status) },
      { key: "dislike", label: "Dislike", glyph: "▼", pressed: reaction?.sentiment === RatingSentiment.NEGATIVE, run: () => react(state, log, m, RatingSentiment.NEGATIVE, status) },
    );
  }
  actions.push(
    { key: "report", label: "Report a problem", glyph: "⚑", run: () => openReport(reportSlot, m, status) },
    { key: "trace", label: "Open the trace", glyph: "⌁", run: () => { location.hash = `#/agents/${encodeURIComponent(state.id)}/trace?trace=${m.traceId}`; } },
    { key: "delete", label: "Delete turn", glyph: "×", run: () => deleteTurn(state, log, m, status) },
  );

  const inline = h(
    "div",
    { class: "actions inline", role: "toolbar", "aria-label": `Actions for this ${roleName(m)} message` },
    actions.map((a) =>
      h("button", {
        type: "button", class: `act act-${a.key}`, title: a.label, "aria-label": a.label,
        "aria-pressed": a.pressed === undefined ? undefined : String(a.pressed),
        onclick: () => void a.run(),
      }, a.glyph ? h("span", { "aria-hidden": "true", class: "glyph" }, a.glyph) : null, h("span", { class: "act-text" }, a.label)),
    ),
  );
  const menu = h("div", { class: "menu", role: "menu", hidden: true });
  const more = h("button", { type: "button", class: "act more", "aria-haspopup": "menu", "aria-expanded": "false", "aria-label": "Message actions", title: "Message actions" }, "⋯");
  const closeMenu = () => { menu.hidden = true; more.setAttribute("aria-expanded", "false"); };
  more.addEventListener("click", () => {
    const open = menu.hidden;
    document.querySelectorAll<HTMLElement>(".menu").forEach((x) => (x.hidden = true));
    menu.hidden = !open;
    more.setAttribute("aria-expanded", String(open));
  });
  mount(
    menu,
    actions.map((a) =>
      h("button", {
        type: "button", role: a.pressed === undefined ? "menuitem" : "menuitemcheckbox", class: `menu-item act-${a.key}`,
        "aria-checked": a.pressed === undefined ? undefined : String(a.pressed),
        onclick: () => { closeMenu(); void a.run(); },
      }, a.glyph ? h("span", { "aria-hidden": "true", class: "glyph" }, a.glyph) : null, a.label),
    ),
  );
  const overflow = h("div", { class: "actions overflow" }, more, menu);

  el.append(
    h("header", { class: "msg-head" }, h("span", { class: "msg-role" }, roleName(m)), h("span", { class: "msg-time" }, timeEl(m.createTime ? timestampDate(m.createTime) : undefined))),
    h("div", { class: "msg-body" }, m.content),
    h("footer", { class: "msg-foot" }, inline, overflow),
    status,
    reportSlot,
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

async function react(state: ChatState, log: HTMLElement, m: Message, sentiment: RatingSentiment, status: HTMLElement): Promise<void> {
  const current = state.reactions.get(m.turnIndex);
  try {
    if (current && current.sentiment === sentiment) {
      await api().feedback.deleteRating({ name: current.name }); // pressing the lit glyph again clears it
      state.reactions.delete(m.turnIndex);
    } else {
      const r = await api().feedback.putRating({
        rating: { conversation: state.instance, turnIndex: m.turnIndex, scope: RatingScope.MESSAGE, aspect: REACTION, sentiment },
        updateMask: { paths: ["sentiment"] },
        requestId: uuid4(),
      });
      state.reactions.set(m.turnIndex, r);
    }
    const fresh = messageEl(state, log, m);
    log.querySelector(`article.msg[data-name="${CSS.escape(m.name)}"]`)?.replaceWith(fresh);
  } catch (e) {
    status.textContent = errorText(e);
  }
}

async function deleteTurn(state: ChatState, log: HTMLElement, m: Message, status: HTMLElement): Promise<void> {
  if (status.dataset.confirm !== m.traceId) {
    status.dataset.confirm = m.traceId;
    mount(status, "Delete both messages of this turn? Feedback already given is kept. ",
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

function openReport(slot: HTMLElement, m: Message, status: HTMLElement): void {
  if (slot.firstChild) {
    slot.querySelector("textarea")?.focus();
    return;
  }
  // One request id per composer: a retry of the same report never stores a second row (AIP-155).
  const requestId = uuid4();
  const words = h("textarea", { rows: 3, class: "report-text", "aria-label": "What went wrong?", placeholder: "What went wrong? Your words are kept exactly as written." });
  const count = h("span", { class: "muted count" }, `0 / ${BODY_LIMIT}`);
  const error = h("p", { class: "error", role: "alert" });
  const submit = h("button", { type: "submit", class: "primary" }, "Send report");
  words.addEventListener("input", () => {
    // The server counts Unicode code points (Python len), not UTF-16 code units: one emoji is 1, not 2.
    const chars = [...words.value].length;
    count.textContent = `${chars} / ${BODY_LIMIT}`;
    count.classList.toggle("over", chars > BODY_LIMIT);
  });
  const form = h(
    "form",
    {
      class: "report",
      onsubmit: async (ev: Event) => {
        ev.preventDefault();
        if (!words.value.trim()) {
          error.textContent = "Say what went wrong first.";
          return;
        }
        submit.disabled = true;
        try {
          const fb = await api().feedback.createFeedback({
            feedback: { target: { case: "message", value: m.name }, body: words.value, surface: Surface.CHAT, sentiment: Sentiment.BAD },
            requestId,
          });
          slot.replaceChildren();
          mount(status, "Reported. ", h("a", { href: `#/feedback?highlight=${encodeURIComponent(fb.name)}` }, "See it on the Feedback page"), ".");
        } catch (e) {
          error.textContent = errorCode(e) === Code.InvalidArgument ? `Not sent. ${errorText(e)}` : errorText(e);
        } finally {
          submit.disabled = false;
        }
      },
    },
    h("label", {}, "Report a problem with this message"),
    words,
    h("div", { class: "report-row" }, count, h("button", { type: "button", onclick: () => slot.replaceChildren() }, "Cancel"), submit),
    error,
  );
  slot.append(form);
  words.focus();
}
