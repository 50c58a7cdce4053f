//! weft's durable state, in SQLite: sink cursors and pull-consumer messages.
