// Module resolve hook for the conformance suite (see preload.mjs): its
// imports of "fs" get fs.mjs, which adds globSync for Node 20.
const fsShim = new URL('./fs.mjs', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if ((specifier === 'fs' || specifier === 'node:fs') &&
    context.parentURL?.includes('/node_modules/@modelcontextprotocol/conformance/dist/')) {
    return { url: fsShim, shortCircuit: true };
  }
  return next(specifier, context);
}
