// A k-way merge of paged lists that each come newest first (the review queue's reports and judgements),
// shown strictly newest first across pages: an item is given out only once no source can still hold a
// newer one, i.e. it is at least as new as the oldest position every unfinished source has reached; the
// rest stays buffered until the sources behind it are read further.

import type { Timestamp } from "@bufbuild/protobuf/wkt";

/** An item's place in the merged order: its time, then its source's rank (at the same time the lower
 * rank comes first, so two sources never tie). */
export interface Position { seconds: bigint; nanos: number; rank: number }

export function positionOf(t: Timestamp | undefined, rank: number): Position {
  return { seconds: t?.seconds ?? 0n, nanos: t?.nanos ?? 0, rank };
}

/** Whether `a` comes before (is newer than) `b` in the merged order. */
export function before(a: Position, b: Position): boolean {
  if (a.seconds !== b.seconds) return a.seconds > b.seconds;
  if (a.nanos !== b.nanos) return a.nanos > b.nanos;
  return a.rank < b.rank;
}

interface Source<T> {
  buffer: T[]; // read, not given out yet, in the source's own (newest first) order
  reached: Position | null; // the position of the last item read (null: nothing read yet)
  finished: boolean; // no page left to read
}

export class NewestFirst<T> {
  private readonly sources: Source<T>[];

  /** `count` sources (numbered 0..count-1, also their ranks); `position(item, source)` places an item.
   * A source that is not read at all is passed as finished from the start (`skip`). */
  constructor(count: number, private readonly position: (item: T, source: number) => Position, skip: number[] = []) {
    this.sources = Array.from({ length: count }, (_, i) => ({ buffer: [], reached: null, finished: skip.includes(i) }));
  }

  /** One page of `source`, in its newest-first order; `finished`: it was the last. */
  add(source: number, items: T[], finished: boolean): void {
    const s = this.sources[source];
    s.buffer.push(...items);
    if (items.length) s.reached = this.position(items[items.length - 1], source);
    s.finished = finished;
  }

  /** The sources to read next before more can be given out: unfinished, with nothing buffered. */
  waiting(): number[] {
    return this.sources.flatMap((s, i) => (!s.finished && !s.buffer.length ? [i] : []));
  }

  /** Every item that is now certainly next, in merged order (none when a source must be read first). */
  take(): T[] {
    const out: T[] = [];
    for (;;) {
      let best = -1;
      let at: Position | null = null;
      this.sources.forEach((s, i) => {
        if (!s.buffer.length) return;
        const p = this.position(s.buffer[0], i);
        if (at === null || before(p, at)) { best = i; at = p; }
      });
      if (best < 0 || at === null) return out;
      const head = at;
      // An unfinished source with nothing buffered may still hold items newer than the head, unless the
      // head is at least as new as the position that source has reached (what it has not sent is older).
      const blocked = this.sources.some((s, i) => i !== best && !s.finished && !s.buffer.length && (s.reached === null || before(s.reached, head)));
      if (blocked) return out;
      out.push(this.sources[best].buffer.shift()!);
    }
  }

  /** Nothing buffered and nothing left to read. */
  done(): boolean {
    return this.sources.every((s) => s.finished && !s.buffer.length);
  }
}
