// A weft filter, in JavaScript: keep a change when its record's integer `id`
// is even, drop it when odd; a record whose `id` is absent, null or not an
// integer is a permanent error ("record has no integer id").
//
// The same filter exists in Rust, Python and C under `examples/`;
// `tests/e2e/languages.rs` checks that all four agree.
//
// Build: scripts/build-examples.sh (or see docs/plugins.md, "Other
// languages"). componentize-js maps the `filter` world's exports to this
// module's exported functions: `result<_, string>` as return/throw, and the
// per-change `result` and `function-error` values as `{tag, val}` objects.

const NO_ID = "record has no integer id";

function permanent(reason) {
  return { tag: "err", val: { tag: "permanent", val: reason } };
}

function keep(change) {
  let record;
  try {
    record = JSON.parse(change.record);
  } catch (error) {
    return permanent(`record is not JSON: ${error.message}`);
  }
  const id = record === null || typeof record !== "object" ? undefined : record.id;
  // JSON numbers are doubles here: an id beyond 2^53 is not exact, so it is
  // refused rather than tested on a rounded value.
  if (!Number.isSafeInteger(id)) {
    return permanent(NO_ID);
  }
  return { tag: "ok", val: id % 2 === 0 };
}

/** Called once per instance with the configuration; nothing to configure. */
export function init(_config) {}

/** One outcome per change, in input order. */
export function filter(_context, batch) {
  return batch.map(keep);
}
