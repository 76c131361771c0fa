// The caller's ratings of one conversation, and the one way the console writes them: a control owns
// one field (or a choice and the sentiment it maps to) of one rating and sends exactly that path in the
// update mask, with the etag it last saw. A stale etag (someone changed the rating meanwhile: another
// tab, another control) is ABORTED by the server; `put` then throws StaleWrite with the current rating
// (from the error detail, else read again) so the control can show it and let the owner retry.
import { ConnectError } from "@connectrpc/connect";
import { api, Code, errorCode, uuid4 } from "./api";
import { RatingOrigin, RatingSchema, type Rating, type RatingScope } from "./gen/agentfeedback/feedback/v1/feedback_pb";

export interface RatingKey {
  turnIndex: number;
  scope: RatingScope;
  aspect: string;
  artifactId?: string;
}

export type RatingPatch = Partial<Pick<Rating, "sentiment" | "choice" | "reasons" | "note" | "category">>;

export class StaleWrite extends Error {
  constructor(public current: Rating | undefined) {
    super("the rating changed meanwhile");
  }
}

const keyOf = (k: RatingKey) => `${k.turnIndex}|${k.scope}|${k.aspect}|${k.artifactId ?? ""}`;

export class RatingStore {
  private byKey = new Map<string, Rating>();

  constructor(readonly conversation: string) {}

  /** Every rating of the caller on this conversation (all pages). */
  async load(): Promise<void> {
    this.byKey.clear();
    let pageToken = "";
    do {
      const r = await api().feedback.listRatings({ conversation: this.conversation, pageSize: 500, pageToken });
      for (const rt of r.ratings) this.byKey.set(keyOf(rt), rt);
      pageToken = r.nextPageToken;
    } while (pageToken);
  }

  get(k: RatingKey): Rating | undefined {
    return this.byKey.get(keyOf(k));
  }

  /** Every rating loaded. */
  all(): Rating[] {
    return [...this.byKey.values()];
  }

  forTurn(turnIndex: number): Rating[] {
    return [...this.byKey.values()].filter((r) => r.turnIndex === turnIndex);
  }

  /** True while a rating is a branch copy nobody has edited on this fork. */
  static isCopy(r: Rating | undefined): boolean {
    return r?.origin === RatingOrigin.BRANCH_COPY;
  }

  /** Write `paths` of the rating at `k` from `patch`, compare-and-swap on the etag last seen.
   *  Throws StaleWrite (with the current rating) when it changed meanwhile; other errors as they are. */
  async put(k: RatingKey, patch: RatingPatch, paths: string[]): Promise<Rating> {
    const seen = this.get(k);
    try {
      const r = await api().feedback.putRating({
        rating: { conversation: this.conversation, turnIndex: k.turnIndex, scope: k.scope, aspect: k.aspect,
          artifactId: k.artifactId ?? "", ...patch, etag: seen?.etag ?? "" },
        updateMask: { paths },
        requestId: uuid4(),
      });
      this.byKey.set(keyOf(r), r);
      return r;
    } catch (e) {
      if (errorCode(e) !== Code.Aborted) throw e;
      const current = ConnectError.from(e).findDetails(RatingSchema)[0] ?? (await this.reread(k));
      if (current) this.byKey.set(keyOf(current), current);
      else this.byKey.delete(keyOf(k));
      throw new StaleWrite(current);
    }
  }

  async remove(k: RatingKey): Promise<void> {
    const r = this.get(k);
    if (!r) return;
    await api().feedback.deleteRating({ name: r.name });
    this.byKey.delete(keyOf(k));
  }

  private async reread(k: RatingKey): Promise<Rating | undefined> {
    const r = await api().feedback.listRatings({ conversation: this.conversation, turnIndex: k.turnIndex, pageSize: 500 });
    return r.ratings.find((x) => keyOf(x) === keyOf(k));
  }
}
