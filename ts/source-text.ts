// Comment stripping, for reading kernel signatures at run time (ts/metal-source.ts)
// and for the contract tests, which read C headers, Swift, Metal and
// TypeScript sources.

/**
 * Replaces // and /* *\/ comments by spaces (keeping newlines, so lines,
 * columns and offsets hold), leaving string literals untouched: Swift
 * triple-quoted strings, "..." and '...' up to the end of their line, and
 * TypeScript `...` templates across lines.
 */
export function stripComments(text: string): string {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    const n = text[i + 1];
    if (c === '/' && n === '/') {
      // Blanked like block comments, so columns and offsets hold too.
      while (i < text.length && text[i] !== '\n') {
        out += ' ';
        i++;
      }
    } else if (c === '/' && n === '*') {
      const end = text.indexOf('*/', i + 2);
      const stop = end < 0 ? text.length : end + 2;
      out += text.slice(i, stop).replace(/[^\n]/g, ' ');
      i = stop;
    } else if (text.startsWith('"""', i)) {
      const end = text.indexOf('"""', i + 3);
      const stop = end < 0 ? text.length : end + 3;
      out += text.slice(i, stop);
      i = stop;
    } else if (c === '"' || c === "'" || c === '`') {
      let j = i + 1;
      while (j < text.length && text[j] !== c && (c === '`' || text[j] !== '\n')) j += text[j] === '\\' ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j + 1;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}
