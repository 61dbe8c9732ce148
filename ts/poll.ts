// Waiting for native work (a commit, a compile) without blocking the event
// loop: the first poll comes after a tick; then setImmediate for the first
// `immediatePolls` polls (work that ends within a fraction of a millisecond
// returns at once), then timeouts doubling from 1 ms to `maxDelayMs`.

export interface PollOptions {
  immediatePolls: number;
  maxDelayMs: number;
}

export function nextTick(): Promise<void> {
  return new Promise((res) => setImmediate(res));
}

function sleep(ms: number): Promise<void> {
  return new Promise((res) => setTimeout(res, ms));
}

/** Resolves once `ended()` is true; `ended` must never block. */
export async function pollUntil(ended: () => boolean, opts: PollOptions): Promise<void> {
  let polls = 0;
  let delay = 1;
  await nextTick();
  while (!ended()) {
    if (polls++ < opts.immediatePolls) {
      await nextTick();
    } else {
      await sleep(delay);
      delay = Math.min(delay * 2, opts.maxDelayMs);
    }
  }
}
