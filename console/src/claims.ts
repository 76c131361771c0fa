// Review claims (FeedbackService.ClaimFeedback / ReleaseFeedback): the claim lives in the service as a
// lease; this tab is one review session (an id kept in sessionStorage, so a reload keeps its claims and
// another tab or browser is another claimant). The open item's claim is renewed while it stays open.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb";
import { api, errorReason, uuid4 } from "./api";
import type { Feedback, FeedbackClaim } from "./gen/agentfeedback/feedback/v1/feedback_pb";

const SESSION_KEY = "agentfeedback.review-session";
/** Lease length asked for (the service allows 1 s .. 30 min); renewed at a third of it. */
export const CLAIM_TTL_S = 120;

export function reviewSession(): string {
  let s = sessionStorage.getItem(SESSION_KEY);
  if (!s) {
    s = uuid4();
    sessionStorage.setItem(SESSION_KEY, s);
  }
  return s;
}

/** The claim of `fb` when it is live and held by another session, else null. */
export function claimedByOther(fb: Feedback, now = Date.now()): FeedbackClaim | null {
  const c = fb.claim;
  if (!c || !c.expireTime || timestampDate(c.expireTime).getTime() <= now) return null;
  return c.session === reviewSession() ? null : c;
}

/** A triage refusal because another session holds the claim (FAILED_PRECONDITION FEEDBACK_CLAIMED):
 * "claimed by alice in another review session until 21:04", else null. */
export function claimRefusal(e: unknown): string | null {
  if (errorReason(e) !== "FEEDBACK_CLAIMED") return null;
  const md = ConnectError.from(e).findDetails(ErrorInfoSchema)[0]?.metadata ?? {};
  const until = md.expire_time ? new Date(md.expire_time) : null;
  return `claimed by ${md.claimant || "another reviewer"} in another review session` +
    (until && !isNaN(until.getTime()) ? ` until ${until.toTimeString().slice(0, 5)}` : "");
}

export type ClaimResult = { ok: true; feedback: Feedback } | { ok: false; held: boolean; error: unknown };

export async function claim(name: string): Promise<ClaimResult> {
  try {
    const feedback = await api().feedback.claimFeedback({ name, session: reviewSession(), ttl: { seconds: BigInt(CLAIM_TTL_S) } });
    return { ok: true, feedback };
  } catch (error) {
    return { ok: false, held: errorReason(error) === "FEEDBACK_CLAIMED", error };
  }
}

export async function release(name: string): Promise<void> {
  try {
    await api().feedback.releaseFeedback({ name, session: reviewSession() });
  } catch {
    // The lease ends by itself at its expiry.
  }
}

/** Keep `name` claimed while `alive()` says so; returns a stop function that also releases it. */
export function holdClaim(name: string, alive: () => boolean): () => void {
  let stopped = false;
  const timer = setInterval(() => {
    if (stopped) return;
    if (!alive()) { stop(); return; }
    void claim(name);
  }, (CLAIM_TTL_S * 1000) / 3);
  const stop = () => {
    if (stopped) return;
    stopped = true;
    clearInterval(timer);
    void release(name);
  };
  return stop;
}
