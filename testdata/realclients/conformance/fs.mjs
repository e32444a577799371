// node:fs with globSync for Node 20, which lacks it. The conformance suite
// calls it only as globSync('**/checks.json', { cwd }).
import fs from 'node:fs';
import path from 'node:path';

export * from 'node:fs';
export default fs;

export function globSync(pattern, options = {}) {
  if (typeof fs.globSync === 'function') return fs.globSync(pattern, options);
  const cwd = options.cwd ? String(options.cwd) : process.cwd();
  const patterns = Array.isArray(pattern) ? pattern : [pattern];
  let entries;
  try {
    entries = fs.readdirSync(cwd, { recursive: true });
  } catch (e) {
    if (e.code === 'ENOENT') return [];
    throw e;
  }
  return entries.map(String).filter((p) => patterns.some((g) => path.matchesGlob(p, g)));
}
