// "My ratings" (#/ratings[?agent=<id>]): every judgement the caller gave, for one agent or across all
// of them (ListRatings per conversation, every page), newest change first, each editable in place: the
// answer (a choice of the question, or like / dislike for the reaction) is written with the etag last
// seen (ratings.ts RatingStore.put, only the fields it owns), and a judgement can be removed. A stale
// write (changed in another tab) shows the current answer and says so.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { errorText, lastSegment } from "../api";
import { h, mount, timeEl } from "../dom";
import { RatingOrigin, RatingSentiment, type Rating } from "../gen/agentfeedback/feedback/v1/feedback_pb";
import { agentName, agentNames, aspectLabel, loadAgentNames, plural, turnLabel } from "../names";
import { RatingStore, StaleWrite, type RatingKey } from "../ratings";
import { go } from "../router";
import { labelOf, sentimentOf, TAXONOMY } from "../taxonomy";

const keyOf = (r: Rating): RatingKey => ({ turnIndex: r.turnIndex, scope: r.scope, aspect: r.aspect, artifactId: r.artifactId });

/** The in-place editor of one rating's answer: a select of its question's choices (or like / dislike). */
function answerControl(store: RatingStore, r: Rating, status: HTMLElement, onSaved: (r: Rating, said: string) => void): HTMLElement {
  const q = TAXONOMY.questions.find((x) => x.aspect === r.aspect);
  const options: [string, string][] = q?.choices.length
    ? q.choices.map((c) => [c.slug, c.label])
    : [[String(RatingSentiment.POSITIVE), "Like"], [String(RatingSentiment.NEGATIVE), "Dislike"]];
  const current = q?.choices.length ? r.choice : String(r.sentiment);
  const sel = h("select", { class: "rating-answer", "aria-label": `Answer to ${aspectLabel(r.aspect)}` },
    current && !options.some(([v]) => v === current) ? h("option", { value: current, selected: true }, labelOf(current)) : null,
    !current ? h("option", { value: "", selected: true }, "—") : null,
    options.map(([v, l]) => h("option", { value: v, selected: v === current }, l)));
  sel.addEventListener("change", async () => {
    status.textContent = "Saving…";
    status.className = "rating-status muted";
    const choice = q?.choices.find((c) => c.slug === sel.value);
    try {
      const saved = choice
        ? await store.put(keyOf(r), { choice: choice.slug, sentiment: sentimentOf(choice.sentiment) }, ["choice", "sentiment"])
        : await store.put(keyOf(r), { sentiment: Number(sel.value) as RatingSentiment }, ["sentiment"]);
      onSaved(saved, "Saved.");
    } catch (e) {
      status.className = "rating-status error";
      if (e instanceof StaleWrite && e.current) {
        onSaved(e.current, "Changed elsewhere meanwhile: this is the current answer; pick again to change it.");
      } else {
        status.textContent = errorText(e);
      }
    }
  });
  return sel;
}

function rowOf(store: RatingStore, r: Rating, replace: (r: Rating | null, said: string) => void, said = ""): HTMLElement {
  const status = h("span", { class: "rating-status", role: "status" }, said);
  const remove = h("button", { type: "button", class: "rating-remove" }, "Remove");
  remove.addEventListener("click", async () => {
    try {
      await store.remove(keyOf(r));
      replace(null, "");
    } catch (e) {
      status.textContent = errorText(e);
    }
  });
  return h("tr", { class: "my-rating", dataset: { name: r.name, aspect: r.aspect } },
    h("td", { class: "col-time" }, timeEl(r.updateTime ? timestampDate(r.updateTime) : undefined)),
    h("td", {}, h("a", { href: `#/agents/${encodeURIComponent(lastSegment(r.conversation))}/chat` }, agentName(r.conversation))),
    h("td", {}, turnLabel(r.turnIndex)),
    h("td", {}, aspectLabel(r.aspect), r.artifactId && r.artifactId !== "0" ? h("span", { class: "muted" }, ` · artifact ${r.artifactId}`) : null,
      r.origin === RatingOrigin.BRANCH_COPY ? h("span", { class: "badge copy" }, "branch copy") : null),
    h("td", {}, answerControl(store, r, status, replace),
      r.reasons.length ? h("div", { class: "feed-reasons" }, r.reasons.map((x) => h("span", { class: "badge reason-badge" }, labelOf(x)))) : null,
      r.note ? h("div", { class: "muted rating-note" }, r.note) : null, status),
    h("td", {}, remove));
}

export async function ratingsPage(main: HTMLElement, query: URLSearchParams): Promise<void> {
  await loadAgentNames();
  const agent = query.get("agent") ?? "";
  const picker = h("select", { id: "ratings-agent", "aria-label": "Agent" }, h("option", { value: "" }, "all agents"),
    [...agentNames().entries()].map(([name, display]) => h("option", { value: lastSegment(name), selected: lastSegment(name) === agent }, display || lastSegment(name))));
  picker.addEventListener("change", () => go(picker.value ? `#/ratings?agent=${encodeURIComponent(picker.value)}` : "#/ratings"));
  const body = h("tbody", {});
  const count = h("p", { class: "muted ratings-count", role: "status" }, "Loading…");
  const error = h("p", { class: "error", role: "alert" });
  mount(main, h("div", { class: "page-head" }, h("h1", {}, "My ratings"), h("label", {}, "Agent ", picker)), count, error,
    h("div", { class: "table-wrap" }, h("table", { class: "fb-table ratings-table" },
      h("thead", {}, h("tr", {}, ["Changed", "Agent", "Turn", "Question", "Your answer", ""].map((c) => h("th", { scope: "col" }, c)))), body)));
  const conversations = agent ? [`instances/${agent}`] : [...agentNames().keys()];
  const all: { store: RatingStore; r: Rating }[] = [];
  const failed: string[] = [];
  await Promise.all(conversations.map(async (c) => {
    const store = new RatingStore(c);
    try {
      await store.load();
      for (const r of store.all()) all.push({ store, r });
    } catch (e) {
      failed.push(`${agentName(c)}: ${errorText(e)}`);
    }
  }));
  all.sort((a, b) => Number((b.r.updateTime?.seconds ?? 0n) - (a.r.updateTime?.seconds ?? 0n)));
  error.textContent = failed.join("; ");
  count.textContent = `${plural(all.length, "rating")}${agent ? ` of ${agentName(`instances/${agent}`)}` : ` across ${plural(conversations.length, "agent")}`}.`;
  const place = (store: RatingStore, r: Rating, tr?: HTMLElement, said = "") => {
    const fresh = rowOf(store, r, (next, message) => {
      if (next) place(store, next, fresh, message);
      else fresh.replaceWith(h("tr", { class: "my-rating removed" }, h("td", { colspan: "6", class: "muted" }, "Removed.")));
    }, said);
    if (tr) tr.replaceWith(fresh);
    else body.append(fresh);
  };
  if (!all.length) body.append(h("tr", {}, h("td", { colspan: "6", class: "muted empty" }, "No ratings yet.")));
  for (const { store, r } of all) place(store, r);
}
