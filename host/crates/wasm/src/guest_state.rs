//! The host state of one instance's store: its WASI context (which grants
//! nothing ambient), its memory limiter and output, and the capabilities
//! it was granted, which its host calls reach through it.

use std::time::{Duration, Instant};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings;
use super::bindings::outbound_http::{Request, Response};
use super::limits::InstanceLimiter;
use super::outbound_http::{self, OutboundHttp};
use super::sandbox::GuestOutput;
use super::source_query::SourceQuery;

/// The host state of one instance's store.
pub(crate) struct GuestState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limiter: InstanceLimiter,
    pub(crate) stderr: GuestOutput,
    /// The granted source-query capability, if any.
    pub(crate) source_query: Option<SourceQuery>,
    /// The granted outbound-http capability, if any.
    pub(crate) outbound_http: Option<OutboundHttp>,
    /// When the current call's time budget runs out (set with the epoch
    /// deadline): host calls that wait, such as HTTP requests, bound
    /// themselves by it.
    pub(crate) call_deadline: Instant,
    /// The function's time budget per call.
    pub(crate) call_timeout: Duration,
}

/// What an instance gets beyond the sandbox's defaults.
#[derive(Debug, Clone, Default)]
pub(crate) struct InstanceOptions {
    /// The source-query capability, for enrichment functions granted it.
    pub(crate) source_query: Option<SourceQuery>,
    /// The outbound-http capability, for enrichment functions granted it.
    pub(crate) outbound_http: Option<OutboundHttp>,
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl bindings::outbound_http::Host for GuestState {
    fn fetch(&mut self, request: Request) -> Result<Response, String> {
        let Some(capability) = &self.outbound_http else {
            // Unreachable in practice: such a component is refused at load.
            return Err("outbound-http is not granted to this function; set \
                 `grants: {http: {allow_hosts: [...]}}` on it in the config"
                .into());
        };
        // Check the host first: a refused host is refused whatever the time.
        capability.check(&request.url)?;
        let time = outbound_http::request_time(self.call_deadline, self.call_timeout);
        if time.is_zero() {
            return Err(format!(
                "no time left for an HTTP request: the call's budget of {:?} (`timeout_ms`) \
                 is spent; make fewer requests per batch or raise `timeout_ms`",
                self.call_timeout
            ));
        }
        capability.fetch_blocking(request, time)
    }
}

impl bindings::source_query::Host for GuestState {
    fn query(&mut self, sql: String, params: Vec<Option<String>>) -> Result<String, String> {
        match &self.source_query {
            Some(capability) => capability.query_blocking(&sql, &params),
            // Unreachable in practice: such a component is refused at load.
            None => Err("source-query is not granted to this function; set \
                 `grants: {source_query: true}` on it in the config"
                .into()),
        }
    }
}
