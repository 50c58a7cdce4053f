//! Which addresses weft's HTTP clients may connect to on an account's
//! behalf: its webhook sinks' deliveries and its functions' outbound HTTP.
//!
//! With `accounts[].deny_internal_http: true` those clients connect to
//! public addresses only. The check runs on the addresses a host name
//! resolves to, inside the client's own resolver, and the client connects
//! only to the addresses that passed: a listed name whose DNS points (or is
//! later pointed) at 127.0.0.1, 10.0.0.8 or the cloud metadata address
//! 169.254.169.254 is refused, which a check of names alone
//! (`allow_hosts`) cannot do. An internal address written in the URL
//! itself never reaches a resolver, so it is checked on the URL.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use weft_config::Config;
use weft_config::hosts::{internal_ip, is_internal};

/// Where an HTTP client may connect.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum HttpEgress {
    /// Any address (the default).
    #[default]
    Any,
    /// Public addresses only, for the named account.
    PublicOnly {
        /// The account whose `deny_internal_http` asks for it.
        account: String,
    },
}

impl HttpEgress {
    /// The policy of the resources `account` owns in `config`.
    pub fn of_account<D>(config: &Config<D>, account: Option<&str>) -> HttpEgress {
        account
            .and_then(|name| config.account(name))
            .filter(|a| a.deny_internal_http)
            .map_or(HttpEgress::Any, |a| HttpEgress::PublicOnly {
                account: a.name.clone(),
            })
    }

    /// `builder` with this policy's resolver, if it has one.
    pub fn configure(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        match self {
            HttpEgress::Any => builder,
            HttpEgress::PublicOnly { account } => {
                builder.dns_resolver(Arc::new(PublicAddressesOnly {
                    account: account.clone(),
                }))
            }
        }
    }

    /// Refuses `url` if its host is an internal IP address written out
    /// (the resolver never sees those); the error says why.
    pub fn check_url(&self, url: &Url) -> Result<(), EgressRefused> {
        let HttpEgress::PublicOnly { account } = self else {
            return Ok(());
        };
        match internal_ip(url.host_str().unwrap_or_default()) {
            Some(ip) => Err(EgressRefused(internal_address(&format!("`{ip}`"), account))),
            None => Ok(()),
        }
    }
}

/// A request refused before it was made, because its URL names an
/// internal address and the account denies internal HTTP; it says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EgressRefused(pub String);

/// The error for a host that is, or resolves only to, internal addresses.
pub fn internal_address(what: &str, account: &str) -> String {
    format!(
        "{what} is an internal address (loopback, private, link-local or reserved), and account \
         {account:?} sets `deny_internal_http: true`, so its HTTP requests go to public \
         addresses only; no connection was made. Use a host with a public address, or have the \
         operator unset deny_internal_http"
    )
}

/// A resolver that hands the client only the public addresses of a name,
/// and fails when it has none.
struct PublicAddressesOnly {
    account: String,
}

impl fmt::Debug for PublicAddressesOnly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicAddressesOnly")
            .field("account", &self.account)
            .finish()
    }
}

impl Resolve for PublicAddressesOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let account = self.account.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (internal, public): (Vec<SocketAddr>, Vec<SocketAddr>) = resolved
                .into_iter()
                .partition(|address| is_internal(address.ip()));
            if public.is_empty() {
                let shown: Vec<String> = internal.iter().map(|a| a.ip().to_string()).collect();
                let what = format!("`{host}` (resolves only to {})", shown.join(", "));
                return Err(internal_address(&what, &account).into());
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_with_internal_addresses_are_refused_only_when_denied() {
        let denied = HttpEgress::PublicOnly {
            account: "acme".into(),
        };
        for url in [
            "http://127.0.0.1:8080/x",
            "https://[::1]/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::ffff:10.0.0.1]/",
        ] {
            let refused = denied
                .check_url(&Url::parse(url).unwrap())
                .unwrap_err()
                .to_string();
            assert!(
                refused.contains("is an internal address")
                    && refused.contains("account \"acme\" sets `deny_internal_http: true`"),
                "{url}: {refused}"
            );
            assert_eq!(HttpEgress::Any.check_url(&Url::parse(url).unwrap()), Ok(()));
        }
        // Names are left to the resolver.
        for url in [
            "http://8.8.8.8/",
            "https://api.example.com/",
            "http://localhost/",
        ] {
            assert_eq!(denied.check_url(&Url::parse(url).unwrap()), Ok(()), "{url}");
        }
    }

    /// A listener nothing serves; a connection would wait in its queue.
    fn untouched_listener() -> std::net::TcpListener {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        listener
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_before_connecting() {
        let target = untouched_listener();
        let port = target.local_addr().unwrap().port();
        let denied = HttpEgress::PublicOnly {
            account: "acme".into(),
        };
        let client = denied
            .configure(reqwest::Client::builder().no_proxy())
            .build()
            .unwrap();
        let error = client
            .get(format!("http://localhost:{port}/"))
            .timeout(std::time::Duration::from_secs(5))
            .send()
            .await
            .unwrap_err();
        let chain = weft_core::error::with_causes(&error);
        assert!(
            chain.contains("`localhost` (resolves only to")
                && chain.contains("127.0.0.1")
                && chain.contains("deny_internal_http"),
            "{chain}"
        );
        match target.accept() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("expected no connection, got {other:?}"),
        }

        // The same client without the policy connects.
        let allowed = HttpEgress::Any
            .configure(reqwest::Client::builder().no_proxy())
            .build()
            .unwrap();
        let request = tokio::spawn(
            allowed
                .get(format!("http://localhost:{port}/"))
                .timeout(std::time::Duration::from_secs(5))
                .send(),
        );
        let accepted = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            loop {
                match target.accept() {
                    Ok(connection) => return connection,
                    Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
                }
            }
        })
        .await;
        assert!(accepted.is_ok(), "the allowed client connected");
        request.abort();
    }
}
