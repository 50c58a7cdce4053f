//! Host bindings generated from `wit/`, one module per world. The shared
//! `weft:plugin/types` interface is generated once (in `transform`) and
//! reused by the other worlds, so a converted change works for every kind.
//! Export parameters borrow (`ownership: Borrowing`): a change points into
//! the host's message instead of copying its strings for every call.

/// The `transform` world.
pub(crate) mod transform {
    wasmtime::component::bindgen!({
        world: "transform",
        path: "../../../wit",
        ownership: Borrowing { duplicate_if_necessary: false },
    });
}

/// The `filter` world.
pub(crate) mod filter {
    wasmtime::component::bindgen!({
        world: "filter",
        path: "../../../wit",
        ownership: Borrowing { duplicate_if_necessary: false },
        with: {
            "weft:plugin/types": super::transform::weft::plugin::types,
        },
    });
}

/// The `routing` world.
pub(crate) mod routing {
    wasmtime::component::bindgen!({
        world: "routing",
        path: "../../../wit",
        ownership: Borrowing { duplicate_if_necessary: false },
        with: {
            "weft:plugin/types": super::transform::weft::plugin::types,
        },
    });
}

/// The `enrichment` world, with its capability imports (`source-query`,
/// `outbound-http`).
pub(crate) mod enrichment {
    wasmtime::component::bindgen!({
        world: "enrichment",
        path: "../../../wit",
        ownership: Borrowing { duplicate_if_necessary: false },
        with: {
            "weft:plugin/types": super::transform::weft::plugin::types,
        },
    });
}

pub(crate) use enrichment::weft::plugin::outbound_http;
pub(crate) use enrichment::weft::plugin::source_query;
pub(crate) use transform::weft::plugin::types;
