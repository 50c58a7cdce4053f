//! The `outbound-http` capability: HTTP requests from enrichment functions
//! to the hosts their config lists, and no others.
//!
//! The allow-list is checked on the request's URL before anything is
//! resolved or connected, so a refused request never leaves the machine.
//! Redirects are never followed (a followed redirect could leave the list),
//! and no proxy is taken from the environment (a proxy would see requests
//! the operator did not route through it). An account with
//! `deny_internal_http` also keeps them off internal addresses
//! ([`crate::http_egress`]). Each request is bounded by what
//! is left of the calling function's time budget and its response body by
//! [`MAX_BODY_BYTES`].

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Url;

use super::bindings::outbound_http::{Request, Response};
use crate::http_egress::HttpEgress;
use weft_config::hosts::AllowedHost;
use weft_config::plugin_registry::Capability;

/// Largest response body a request may return: 1 MiB. A larger body is an
/// error (never a truncated body).
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Longest any one request may take, whatever the function's timeout.
pub const MAX_REQUEST_TIME: Duration = Duration::from_secs(30);

/// Smallest part of the call's budget kept back from a request, so that the
/// guest can still handle a timed-out request before its call times out.
const MIN_RESERVE: Duration = Duration::from_millis(20);

/// The import's full name, as it appears in a component's imports.
pub(crate) const IMPORT_NAME: &str = Capability::OutboundHttp.import();

/// A granted outbound-http capability. Cheap to clone; clones share the
/// connection pool.
#[derive(Clone)]
pub struct OutboundHttp {
    inner: Arc<Inner>,
}

struct Inner {
    function: String,
    allow: Vec<AllowedHost>,
    egress: HttpEgress,
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl fmt::Debug for OutboundHttp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboundHttp")
            .field("function", &self.inner.function)
            .field("allow", &self.inner.allow)
            .finish_non_exhaustive()
    }
}

impl OutboundHttp {
    /// The capability for `function`, allowed to reach the hosts in `allow`
    /// at the addresses `egress` allows, running requests on `runtime`.
    /// Nothing connects until the first request.
    pub fn new(
        function: &str,
        allow: Vec<AllowedHost>,
        egress: HttpEgress,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, String> {
        let client = {
            let _entered = runtime.enter();
            let builder = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy();
            egress
                .configure(builder)
                .build()
                .map_err(|e| format!("cannot create the HTTP client: {e}"))?
        };
        Ok(OutboundHttp {
            inner: Arc::new(Inner {
                function: function.to_string(),
                allow,
                egress,
                client,
                runtime,
            }),
        })
    }

    /// Checks `url` against the allow-list; the error names the host and the
    /// entry that would allow it.
    pub(crate) fn check(&self, url: &str) -> Result<Url, String> {
        let parsed = Url::parse(url).map_err(|e| format!("invalid URL `{url}`: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "URL `{url}`: only http and https are allowed, not `{}`",
                parsed.scheme()
            ));
        }
        let host = parsed
            .host_str()
            .ok_or_else(|| format!("URL `{url}` has no host"))?;
        let port = parsed
            .port_or_known_default()
            .expect("http and https have default ports");
        if self
            .inner
            .allow
            .iter()
            .any(|entry| entry.allows(host, port))
        {
            self.inner
                .egress
                .check_url(&parsed)
                .map_err(|refused| refused.0)?;
            return Ok(parsed);
        }
        let listed: Vec<String> = self.inner.allow.iter().map(|e| e.to_string()).collect();
        Err(format!(
            "host `{host}:{port}` is not on the HTTP allow-list of function `{}` ({}); \
             no request was sent. To allow it, add `{host}` (any port) or `{host}:{port}` \
             to `grants.http.allow_hosts` of the function in the config",
            self.inner.function,
            listed.join(", ")
        ))
    }

    /// Sends `request` if its host is allowed, waiting at most `time` for the
    /// whole response. Blocks the calling thread, which must not be an async
    /// worker thread.
    pub(crate) fn fetch_blocking(
        &self,
        request: Request,
        time: Duration,
    ) -> Result<Response, String> {
        let url = self.check(&request.url)?;
        let host = format!(
            "{}:{}",
            url.host_str().unwrap_or_default(),
            url.port_or_known_default().unwrap_or_default()
        );
        let builder = self.build(url, request)?;
        self.inner.runtime.block_on(async {
            match tokio::time::timeout(time, send(builder)).await {
                Ok(result) => result.map_err(|e| format!("HTTP request to `{host}` failed: {e}")),
                Err(_) => Err(format!(
                    "HTTP request to `{host}` timed out after {time:?} (what was left of the \
                     function's call budget, `timeout_ms`, less a reserve to handle this error)"
                )),
            }
        })
    }

    fn build(&self, url: Url, request: Request) -> Result<reqwest::RequestBuilder, String> {
        let method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|_| format!("invalid HTTP method `{}`", request.method))?;
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in request.headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("invalid header name `{name}`"))?;
            let value = reqwest::header::HeaderValue::from_str(&value)
                .map_err(|_| format!("invalid value for header `{name}`"))?;
            headers.append(name, value);
        }
        let mut builder = self.inner.client.request(method, url).headers(headers);
        if let Some(body) = request.body {
            builder = builder.body(body);
        }
        Ok(builder)
    }
}

/// Sends the request and reads the body, refusing one above the cap.
async fn send(builder: reqwest::RequestBuilder) -> Result<Response, String> {
    let mut response = builder
        .send()
        .await
        .map_err(|e| weft_core::error::with_causes(&e))?;
    let too_large = || format!("the response body is larger than {MAX_BODY_BYTES} bytes (the cap)");
    if response
        .content_length()
        .is_some_and(|length| length > MAX_BODY_BYTES as u64)
    {
        return Err(too_large());
    }
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
        .collect();
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| weft_core::error::with_causes(&e))?
    {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// How long a request made now may take: what is left until the call's
/// deadline, less a reserve (a tenth of the call's budget, at least
/// [`MIN_RESERVE`]) for the guest to handle the outcome, and at most
/// [`MAX_REQUEST_TIME`]. Zero when nothing is left.
pub(crate) fn request_time(deadline: Instant, call_timeout: Duration) -> Duration {
    let reserve = (call_timeout / 10).max(MIN_RESERVE);
    deadline
        .saturating_duration_since(Instant::now())
        .saturating_sub(reserve)
        .min(MAX_REQUEST_TIME)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(entry: &str) -> AllowedHost {
        AllowedHost::parse(entry).unwrap_or_else(|e| panic!("{entry}: {e}"))
    }

    #[test]
    fn urls_are_checked_by_host_and_port_before_any_request() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let http = OutboundHttp::new(
            "lookup",
            vec![parse("api.example.com"), parse("127.0.0.1:8080")],
            HttpEgress::Any,
            runtime.handle().clone(),
        )
        .unwrap();
        assert!(http.check("https://API.example.com/v1?q=1").is_ok());
        assert!(http.check("http://api.example.com:9999/").is_ok());
        assert!(http.check("http://127.0.0.1:8080/x").is_ok());
        let error = http.check("http://127.0.0.1:8081/x").unwrap_err();
        assert!(
            error.contains(
                "host `127.0.0.1:8081` is not on the HTTP allow-list of function `lookup`"
            ) && error.contains("`grants.http.allow_hosts`"),
            "{error}"
        );
        // The default port is the one checked.
        assert!(http.check("http://127.0.0.1/").is_err());
        assert!(http.check("http://api.example.com.evil.test/").is_err());
        assert!(
            http.check("ftp://api.example.com/")
                .unwrap_err()
                .contains("only http and https")
        );
        assert!(http.check("/relative").unwrap_err().contains("invalid URL"));
    }

    #[test]
    fn requests_get_what_is_left_of_the_call_budget_less_a_reserve() {
        let second = Duration::from_secs(1);
        let time = request_time(Instant::now() + second, second);
        assert!(
            time <= Duration::from_millis(900) && time > Duration::from_millis(800),
            "{time:?}"
        );
        assert_eq!(
            request_time(Instant::now() + Duration::from_millis(10), second),
            Duration::ZERO
        );
        assert_eq!(
            request_time(Instant::now() + 3600 * second, 3600 * second),
            MAX_REQUEST_TIME
        );
    }
}
