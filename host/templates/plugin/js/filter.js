// {{name}}: a weft filter, in JavaScript. It keeps every change but deletes;
// change `keep` to decide what the sink receives.
//
// componentize-js maps the `filter` world's exports to this module's
// exported functions. `change.record` is the row as JSON text; per-change
// results are `{tag: "ok", val: bool}` or
// `{tag: "err", val: {tag: "permanent" | "transient", val: reason}}`.

function keep(change) {
  return { tag: "ok", val: change.action !== "delete" };
}

/** Called once per instance with the config, a list of [key, value]. */
export function init(_config) {}

/** One outcome per change, in input order. */
export function filter(_context, batch) {
  return batch.map(keep);
}
