// {{name}}: a weft transform, in JavaScript. It turns each change into
// {"action": ..., "record": {...}}; change `payload` to build what the sink
// sends.
//
// componentize-js maps the `transform` world's exports to this module's
// exported functions. `change.record` is the row as JSON text (kept as text
// here so that big numbers keep every digit); per-change results are
// `{tag: "ok", val: {tag: "json", val: text}}` or
// `{tag: "err", val: {tag: "permanent" | "transient", val: reason}}`.

function payload(change) {
  const json = `{"action":${JSON.stringify(change.action)},"record":${change.record}}`;
  return { tag: "ok", val: { tag: "json", val: json } };
}

/** Called once per instance with the config, a list of [key, value]. */
export function init(_config) {}

/** One outcome per change, in input order. */
export function transform(_context, batch) {
  return batch.map(payload);
}
