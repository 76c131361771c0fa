// Typed access to taxonomy.json, the one feedback vocabulary (aspects, choices and the sentiment each
// maps to, reasons per choice, report categories, statistics defaults). Nothing in the console names an
// aspect, choice, reason or category that is not read from that file.
import { Category, RatingScope, RatingSentiment } from "./gen/agentfeedback/feedback/v1/feedback_pb";
import raw from "./taxonomy.json";

export interface Reason { slug: string; label: string }
export interface Choice { slug: string; label: string; sentiment: string; reasons: Reason[]; note_prompt?: string }
export interface Question {
  aspect: string;
  scope: string;
  label: string;
  choices: Choice[];
  sentiments?: string[];
  min_turns?: number;
  /** When it is asked: exists | changed | revised | paths | forked (taxonomy.json's $comment). */
  when?: string;
  /** `workspace`: a component question (the modal's workspace section), never a trajectory one. */
  section?: string;
}

export const TAXONOMY = raw as unknown as {
  version: number;
  stats: { reaction_aspect: string; completion_aspect: string; complete_choice: string };
  questions: Question[];
  report_categories: { category: string; label: string }[];
};

export function question(aspect: string): Question {
  const q = TAXONOMY.questions.find((x) => x.aspect === aspect);
  if (!q) throw new Error(`taxonomy.json has no question ${aspect}`);
  return q;
}

export const scopeOf = (q: Question): RatingScope => RatingScope[q.scope as keyof typeof RatingScope];
export const sentimentOf = (name: string): RatingSentiment => RatingSentiment[name as keyof typeof RatingSentiment];
export const categoryOf = (name: string): Category => Category[name as keyof typeof Category] ?? Category.OTHER;

/** The label of a choice or reason slug of any question (for feeds and dashboards), else the slug. */
export function labelOf(slug: string): string {
  for (const q of TAXONOMY.questions) {
    for (const c of q.choices) {
      if (c.slug === slug) return c.label;
      const r = c.reasons.find((x) => x.slug === slug);
      if (r) return r.label;
    }
  }
  return slug;
}

/** Every reason slug of the taxonomy (deduplicated), for filters. */
export function allReasons(): Reason[] {
  const seen = new Map<string, Reason>();
  for (const q of TAXONOMY.questions) for (const c of q.choices) for (const r of c.reasons) seen.set(r.slug, r);
  return [...seen.values()];
}

/** Every choice slug with the question it answers, for filters. */
export function allChoices(): { slug: string; label: string; aspect: string }[] {
  return TAXONOMY.questions.flatMap((q) => q.choices.map((c) => ({ slug: c.slug, label: `${q.label}: ${c.label}`, aspect: q.aspect })));
}

/** The reply, trajectory and artifact sections' questions (by scope), in taxonomy order. */
export const REACTION = TAXONOMY.stats.reaction_aspect;
export const REPLY_QUESTIONS = TAXONOMY.questions.filter((q) => q.scope === "MESSAGE" && q.aspect !== REACTION);
export const TRAJECTORY_QUESTIONS = TAXONOMY.questions.filter((q) => (q.scope === "CONVERSATION" || q.scope === "OBJECTIVE") && q.section !== "workspace");
/** The workspace components' questions (objective, plan, preferences), in taxonomy order. */
export const WORKSPACE_QUESTIONS = TAXONOMY.questions.filter((q) => q.section === "workspace");
export const ARTIFACT_QUESTIONS = TAXONOMY.questions.filter((q) => q.scope === "ARTIFACT");
/** The live document's artifact id (proto: Rating.artifact_id `0`). */
export const LIVE_DOCUMENT = "0";

/** The taxonomy's label of a report category; a number this console does not know (a newer client's,
 *  stored as sent) reads "other (N)", unspecified "—". */
export function categoryLabel(c: Category): string {
  if (c === Category.UNSPECIFIED) return "—";
  return TAXONOMY.report_categories.find((x) => categoryOf(x.category) === c)?.label ?? `other (${c})`;
}
