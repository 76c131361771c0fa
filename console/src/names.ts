// Names people read instead of ids: agents by display name (ChatService.ListInstances, cached per
// session), turns numbered from 1 ("Turn 3" is turn_index 2: docs/architecture.md "Turn numbers"),
// counts with their plural, aspects by their taxonomy label.
import { api, lastSegment } from "./api";
import { Status } from "./gen/agentfeedback/feedback/v1/feedback_pb";
import { TAXONOMY } from "./taxonomy";

const agents = new Map<string, string>(); // instances/<id> → display name
let loaded: Promise<void> | null = null;

/** Load the caller's agents' names once (up to 1000 agents); a failure leaves ids as labels. */
export function loadAgentNames(force = false): Promise<void> {
  if (!loaded || force) {
    loaded = (async () => {
      let pageToken = "";
      try {
        for (let page = 0; page < 5; page++) {
          const r = await api().chat.listInstances({ pageSize: 200, pageToken });
          for (const i of r.instances) agents.set(i.name, i.displayName);
          pageToken = r.nextPageToken;
          if (!pageToken) break;
        }
      } catch {
        loaded = null; // try again next time; labels fall back to the id meanwhile
      }
    })();
  }
  return loaded;
}

/** The caller's agents (name → display name), as loaded. */
export function agentNames(): Map<string, string> {
  return agents;
}

/** "Ops desk" for `instances/<id>` when the caller owns it, else the bare id (another owner's agent). */
export function agentName(instance: string): string {
  return agents.get(instance) || lastSegment(instance);
}

/** The one turn numbering people read: turn_index 0 is "Turn 1". */
export function turnNumber(turnIndex: number): number {
  return turnIndex + 1;
}

export function turnLabel(turnIndex: number): string {
  return `Turn ${turnNumber(turnIndex)}`;
}

/** "1 dislike", "2 dislikes", "1 reply", "0 replies" (English plural rules through Intl.PluralRules). */
const rules = new Intl.PluralRules("en-US");
export function plural(n: number | bigint, one: string, other = `${one}s`): string {
  return `${n} ${rules.select(Number(n)) === "one" ? one : other}`;
}

/** The taxonomy's label of an aspect slug (`reply_judgement` → "How did this reply do?"), else the slug. */
export function aspectLabel(aspect: string): string {
  return TAXONOMY.questions.find((q) => q.aspect === aspect)?.label ?? aspect;
}

// A proto enum value as words: `RATING_SCOPE_MESSAGE` → "rating scope message" (unknown numbers as digits).
export function enumLabel(e: Record<number, string>, v: number): string {
  return (e[v] ?? String(v)).toLowerCase().replace(/_/g, " ");
}

// A report's status as the console names it (filters, badges, the triage select).
export const STATUS_NAMES: [Status, string][] = [
  [Status.OPEN, "open"],
  [Status.TRIAGED, "triaged"],
  [Status.FILED, "filed"],
  [Status.DISMISSED, "dismissed"],
];

export function statusName(s: Status): string {
  return STATUS_NAMES.find(([v]) => v === s)?.[1] ?? "unspecified";
}
