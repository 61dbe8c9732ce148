// Duplicate keys in JSON text. JSON.parse keeps the last of two equal keys
// without a word; a weight file whose header names a tensor twice (or gives
// a tensor two dtypes) is inconsistent, so the readers look for them in the
// text JSON.parse accepted. One pass over the text, O(its length).

/** The first key that an object of the text holds twice, with the key of the object that holds it (null at the top level). */
export function findDuplicateKey(text: string): { key: string; parent: string | null } | null {
  interface Frame {
    object: boolean;
    keys: Set<string> | null;
    expectKey: boolean;
    parent: string | null;
  }
  const stack: Frame[] = [];
  let lastKey: string | null = null;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x7b /* { */) {
      stack.push({ object: true, keys: new Set(), expectKey: true, parent: lastKey });
    } else if (c === 0x5b /* [ */) {
      stack.push({ object: false, keys: null, expectKey: false, parent: lastKey });
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) {
      stack.pop();
    } else if (c === 0x2c /* , */) {
      const top = stack[stack.length - 1];
      if (top?.object) top.expectKey = true;
    } else if (c === 0x22 /* " */) {
      // The closing quote: the next one after an even run of backslashes (the text is valid JSON).
      let j = text.indexOf('"', i + 1);
      for (;;) {
        if (j < 0) return null;
        let k = j - 1;
        while (text.charCodeAt(k) === 0x5c) k--;
        if ((j - 1 - k) % 2 === 0) break;
        j = text.indexOf('"', j + 1);
      }
      const top = stack[stack.length - 1];
      if (top?.object && top.expectKey) {
        const raw = text.slice(i + 1, j);
        const key = raw.includes('\\') ? (JSON.parse(text.slice(i, j + 1)) as string) : raw;
        if (top.keys!.has(key)) return { key, parent: top.parent };
        top.keys!.add(key);
        top.expectKey = false;
        lastKey = key;
      }
      i = j;
    }
  }
  return null;
}
