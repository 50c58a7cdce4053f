//! The WebAssembly function host: engine, sandbox limits and bindings to the
//! `weft:plugin` WIT package.
