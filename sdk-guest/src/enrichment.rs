//! The enrichment kind: extra JSON per change, for `metadata.enrichment`,
//! and the host capabilities an enrichment may be granted.

use std::any::Any;
use std::cell::RefCell;

use serde_json::Value;

use crate::{Change, Config, Error};

crate::wit_conversions!(crate::bindings::enrichment::weft::plugin::types);

/// An enrichment function: adds data to each change's
/// `metadata.enrichment`, which later functions and consumers see.
///
/// Implement [`Enrichment::enrich`] for per-change work, or override
/// [`Enrichment::enrich_batch`] to look data up once per batch (e.g. one
/// [`source_query`] or one [`http_fetch`] for all the batch's keys).
///
/// ```ignore
/// use weft_sdk_guest::enrichment::source_query;
/// use weft_sdk_guest::serde_json::{json, Value};
/// use weft_sdk_guest::{export_enrichment, Change, Config, Enrichment, Error};
///
/// /// Adds the customer's name, read from the source database. Needs
/// /// `grants: {source_query: true}` on the function in the config.
/// struct CustomerName;
///
/// impl Enrichment for CustomerName {
///     fn init(_config: Config) -> Result<Self, String> {
///         Ok(CustomerName)
///     }
///
///     fn enrich(&mut self, change: Change) -> Result<Option<Value>, Error> {
///         let Some(id) = change.get::<i64>("customer_id")? else { return Ok(None) };
///         let rows = source_query("SELECT name FROM customers WHERE id = $1::bigint",
///                                 &[Some(id.to_string())])?;
///         Ok(rows.first().map(|row| json!({"customer_name": row["name"]})))
///     }
/// }
///
/// export_enrichment!(CustomerName);
/// ```
pub trait Enrichment: Sized + 'static {
    /// Builds the enrichment from its configuration.
    fn init(config: Config) -> Result<Self, String>;

    /// The JSON for one change's `metadata.enrichment`, or `None`.
    fn enrich(&mut self, change: Change) -> Result<Option<Value>, Error>;

    /// One outcome per change, in order. The default calls
    /// [`Enrichment::enrich`] for each change; override it to batch lookups.
    /// It must return exactly one outcome per change.
    fn enrich_batch(&mut self, batch: Vec<Change>) -> Vec<Result<Option<Value>, Error>> {
        batch
            .into_iter()
            .map(|change| self.enrich(change))
            .collect()
    }
}

/// Runs a read-only, parameterised query on the source database and returns
/// its rows as JSON objects. Each `params[i]` binds `$<i+1>` as text (`None`
/// is NULL); cast in SQL where needed (`$1::bigint`, `$1::int[]`).
///
/// Only available when the function's config grants it
/// (`grants: {source_query: true}`); a component that calls this without the
/// grant is refused when weft loads it. A failure (SQL error, timeout,
/// lost connection) comes back as a transient [`Error`].
pub fn source_query(sql: &str, params: &[Option<String>]) -> Result<Vec<Value>, Error> {
    let text = crate::bindings::enrichment::weft::plugin::source_query::query(sql, params)
        .map_err(|reason| Error::transient(format!("source query failed: {reason}")))?;
    match serde_json::from_str(&text) {
        Ok(Value::Array(rows)) => Ok(rows),
        Ok(_) | Err(_) => Err(Error::transient(
            "source query returned something other than a JSON array",
        )),
    }
}

/// An HTTP request for [`http_fetch`]: method, absolute `http`/`https` URL,
/// headers and an optional body.
pub use crate::bindings::enrichment::weft::plugin::outbound_http::Request as HttpRequest;
/// The response to an [`http_fetch`], whatever its status: status code,
/// headers (lower-case names) and the whole body.
pub use crate::bindings::enrichment::weft::plugin::outbound_http::Response as HttpResponse;

impl HttpRequest {
    /// A `GET` of `url` with no headers.
    pub fn get(url: impl Into<String>) -> Self {
        HttpRequest {
            method: "GET".into(),
            url: url.into(),
            headers: Vec::new(),
            body: None,
        }
    }

    /// A `POST` of `body` as JSON (`content-type: application/json`) to `url`.
    pub fn post_json(url: impl Into<String>, body: &Value) -> Self {
        HttpRequest {
            method: "POST".into(),
            url: url.into(),
            headers: vec![("content-type".into(), "application/json".into())],
            body: Some(body.to_string().into_bytes()),
        }
    }

    /// This request with one more header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

impl HttpResponse {
    /// The body parsed as JSON; an error (permanent: the same body would
    /// fail again) if it is not JSON.
    pub fn json(&self) -> Result<Value, Error> {
        serde_json::from_slice(&self.body)
            .map_err(|e| Error::permanent(format!("HTTP response body is not JSON: {e}")))
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// Sends an HTTP request to a host the function's config allows and returns
/// the whole response (a 4xx or 5xx status is a response, not an error).
///
/// Only available when the function's config grants it
/// (`grants: {http: {allow_hosts: [api.example.com]}}`); a component that
/// calls this without the grant is refused when weft loads it. The host
/// refuses, without connecting, a URL whose host (and port, if the entry
/// names one) is not on the list. A request may take what is left of the
/// call's `timeout_ms` (waiting counts against it) less a tenth kept for
/// handling the outcome; bodies are capped at 1 MiB; redirects are returned,
/// not followed. Make one request per batch where the API allows it.
///
/// Every failure (host not allowed, no connection, timeout, body too
/// large) comes back as a transient [`Error`] with the host's reason, so the
/// change is retried later rather than dead-lettered.
///
/// ```ignore
/// use weft_sdk_guest::enrichment::{http_fetch, HttpRequest};
///
/// let response = http_fetch(HttpRequest::get("https://api.example.com/rates?ccy=EUR")
///     .header("accept", "application/json"))?;
/// if !response.is_success() {
///     return Err(Error::transient(format!("rates API answered {}", response.status)));
/// }
/// let rates = response.json()?;
/// ```
pub fn http_fetch(request: HttpRequest) -> Result<HttpResponse, Error> {
    crate::bindings::enrichment::weft::plugin::outbound_http::fetch(&request)
        .map_err(|reason| Error::transient(format!("HTTP request failed: {reason}")))
}

thread_local! {
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

#[doc(hidden)]
pub fn __init<T: Enrichment>(config: wit::Config) -> Result<(), String> {
    let enrichment = T::init(Config::from(config))?;
    INSTANCE.with_borrow_mut(|slot| *slot = Some(Box::new(enrichment)));
    Ok(())
}

#[doc(hidden)]
pub fn __enrich<T: Enrichment>(
    context: wit::BatchContext,
    batch: Vec<wit::Change>,
) -> Vec<Result<Option<String>, wit::FunctionError>> {
    INSTANCE.with_borrow_mut(
        |slot| match slot.as_mut().and_then(|b| b.downcast_mut::<T>()) {
            Some(enrichment) => enrichment
                .enrich_batch(changes_of(context, batch).collect())
                .into_iter()
                .map(|outcome| {
                    outcome
                        .map(|value| value.map(|v| v.to_string()))
                        .map_err(Into::into)
                })
                .collect(),
            None => batch
                .iter()
                .map(|_| {
                    Err(wit::FunctionError::Transient(
                        "enrich called before init".into(),
                    ))
                })
                .collect(),
        },
    )
}

/// Exports a type implementing [`Enrichment`] as the component's
/// `enrichment` world.
///
/// ```ignore
/// weft_sdk_guest::export_enrichment!(MyEnrichment);
/// ```
#[macro_export]
macro_rules! export_enrichment {
    ($ty:ty) => {
        const _: () = {
            struct __WeftEnrichmentExport;

            impl $crate::bindings::enrichment::Guest for __WeftEnrichmentExport {
                fn init(
                    config: $crate::bindings::enrichment::weft::plugin::types::Config,
                ) -> ::core::result::Result<(), ::std::string::String> {
                    $crate::enrichment::__init::<$ty>(config)
                }

                fn enrich(
                    context: $crate::bindings::enrichment::weft::plugin::types::BatchContext,
                    batch: ::std::vec::Vec<
                        $crate::bindings::enrichment::weft::plugin::types::Change,
                    >,
                ) -> ::std::vec::Vec<
                    ::core::result::Result<
                        ::core::option::Option<::std::string::String>,
                        $crate::bindings::enrichment::weft::plugin::types::FunctionError,
                    >,
                > {
                    $crate::enrichment::__enrich::<$ty>(context, batch)
                }
            }

            $crate::bindings::enrichment::export_enrichment_world!(
                __WeftEnrichmentExport with_types_in $crate::bindings::enrichment
            );
        };
    };
}
