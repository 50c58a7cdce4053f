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
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::config::Config;

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
    pub fn of_account(config: &Config, account: Option<&str>) -> HttpEgress {
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
    pub fn check_url(&self, url: &Url) -> Result<(), String> {
        let HttpEgress::PublicOnly { account } = self else {
            return Ok(());
        };
        match internal_ip(url.host_str().unwrap_or_default()) {
            Some(ip) => Err(internal_address(&format!("`{ip}`"), account)),
            None => Ok(()),
        }
    }
}

/// The address `host` names, if it is an internal IP address written out
/// (as URLs write hosts: IPv6 in brackets); `None` for a name or a public
/// address.
pub fn internal_ip(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
        .filter(|ip| is_internal(*ip))
}

/// The error for a host that is, or resolves only to, internal addresses.
pub fn internal_address(what: &str, account: &str) -> String {
    format!(
        "{what} is an internal address (loopback, private, link-local or reserved), and account \
         {account:?} sets `deny_internal_http: true`, so its HTTP requests go to public \
         addresses only; no connection was made. Use a host with a public address, or have the \
         operator unset deny_internal_http"
    )
}

/// Whether `ip` is internal: loopback, private, link-local, shared (carrier
/// NAT), unspecified, broadcast, multicast, documentation, benchmarking or
/// reserved, including IPv6 forms that embed such an IPv4 address
/// (IPv4-mapped, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`).
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => is_internal_v4(ip),
        IpAddr::V6(ip) => is_internal_v6(ip),
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0 // "this network", 0.0.0.0/8
        || (a == 100 && b & 0xc0 == 64) // shared address space, 100.64.0.0/10
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments, 192.0.0.0/24
        || (a == 198 && b & 0xfe == 18) // benchmarking, 198.18.0.0/15
        || a >= 240 // reserved, 240.0.0.0/4
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_internal_v4(v4);
    }
    let s = ip.segments();
    let embedded = |high: u16, low: u16| {
        is_internal_v4(Ipv4Addr::from((u32::from(high) << 16) | u32::from(low)))
    };
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || s[..6] == [0; 6] // IPv4-compatible (deprecated), ::/96
        || s[0] & 0xfe00 == 0xfc00 // unique local, fc00::/7
        || s[0] & 0xffc0 == 0xfe80 // link-local, fe80::/10
        || s[0] & 0xffc0 == 0xfec0 // site-local (deprecated), fec0::/10
        || (s[0] == 0x2001 && s[1] == 0x0db8) // documentation, 2001:db8::/32
        || (s[0] == 0x0100 && s[1..4] == [0; 3]) // discard only, 100::/64
        || (s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] && embedded(s[6], s[7])) // NAT64
        || (s[0] == 0x2002 && embedded(s[1], s[2])) // 6to4
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
    fn internal_and_public_addresses_are_told_apart() {
        let internal = [
            "127.0.0.1",
            "127.255.0.9",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "198.19.255.255",
            "240.0.0.1",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "100::1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::1",
        ];
        let public = [
            "1.1.1.1",
            "8.8.8.8",
            "100.128.0.1",
            "100.63.255.255",
            "172.32.0.1",
            "192.0.1.1",
            "198.20.0.1",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ];
        for address in internal {
            assert!(
                is_internal(address.parse().unwrap()),
                "{address} is internal"
            );
        }
        for address in public {
            assert!(
                !is_internal(address.parse().unwrap()),
                "{address} is public"
            );
        }
    }

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
            let refused = denied.check_url(&Url::parse(url).unwrap()).unwrap_err();
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
        let chain = crate::plugins::outbound_http::error_chain(&error);
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
