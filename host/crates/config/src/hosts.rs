//! Hosts and addresses as the config names them: the entries of an
//! `allow_hosts` list, and which IP addresses are internal. The config
//! checks them as it loads; the HTTP clients of the runtime enforce the
//! same rules on every connection (`weft_wasm::http_egress`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::Url;

/// One `grants.http.allow_hosts` entry: a host, and optionally the only port
/// allowed on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedHost {
    /// The host as a URL serializes it: lower case, IDNA-encoded, IPv6 in
    /// brackets.
    host: String,
    /// `None`: any port.
    port: Option<u16>,
}

/// An entry that names no host (or no valid port); it says what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HostError(pub String);

impl AllowedHost {
    /// Parses `host` or `host:port` (IPv6 addresses in brackets:
    /// `[::1]:8080`). The error says what is wrong with the entry.
    pub fn parse(entry: &str) -> Result<Self, HostError> {
        Self::parse_text(entry).map_err(HostError)
    }

    fn parse_text(entry: &str) -> Result<Self, String> {
        let entry = entry.trim();
        if entry.is_empty() {
            return Err("is empty; write a host name or address, e.g. `api.example.com`".into());
        }
        if entry.contains("://") || entry.contains(['/', '?', '#', '@']) {
            return Err(format!(
                "`{entry}` is not a host: write only the host and optional port, \
                 e.g. `api.example.com` or `127.0.0.1:8080` (no scheme, path or user)"
            ));
        }
        let (host, port) = match entry.strip_prefix('[') {
            Some(rest) => {
                let (inside, after) = rest
                    .split_once(']')
                    .ok_or_else(|| format!("`{entry}` has no closing `]`"))?;
                let port = match after {
                    "" => None,
                    _ => Some(after.strip_prefix(':').ok_or_else(|| {
                        format!("`{entry}`: expected `:port` after the bracketed address")
                    })?),
                };
                (format!("[{inside}]"), port)
            }
            None => match entry.matches(':').count() {
                0 => (entry.to_string(), None),
                1 => {
                    let (host, port) = entry.split_once(':').expect("one colon");
                    (host.to_string(), Some(port))
                }
                _ => {
                    return Err(format!(
                        "`{entry}`: write an IPv6 address in brackets, e.g. `[::1]:8080`"
                    ));
                }
            },
        };
        let port = port
            .map(|port| match port.parse::<u16>() {
                Ok(port) if port != 0 => Ok(port),
                _ => Err(format!(
                    "`{entry}`: the port must be a number from 1 to 65535"
                )),
            })
            .transpose()?;
        let url = Url::parse(&format!("http://{host}/"))
            .map_err(|e| format!("`{entry}` is not a valid host name or address: {e}"))?;
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("`{entry}` is not a valid host name or address"))?
            .to_string();
        Ok(AllowedHost { host, port })
    }

    /// The host, as a URL writes it.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether a connection to `host` on `port` is allowed by this entry.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        self.host == host && self.port.is_none_or(|p| p == port)
    }

    /// `host` and `port` as an allow-list entry would name them.
    pub fn address(host: &str, port: u16) -> Result<AllowedHost, HostError> {
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        AllowedHost::parse(&format!("{host}:{port}"))
    }

    /// Whether every connection `other` allows, this entry allows too
    /// (the same host, and this entry's port, if it names one).
    pub fn covers(&self, other: &AllowedHost) -> bool {
        self.host == other.host && self.port.is_none_or(|p| other.port == Some(p))
    }
}

impl fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(entry: &str) -> AllowedHost {
        AllowedHost::parse(entry).unwrap_or_else(|e| panic!("{entry}: {e}"))
    }

    #[test]
    fn allow_list_entries_parse_and_normalise() {
        assert_eq!(parse("API.Example.com").to_string(), "api.example.com");
        assert_eq!(parse("127.0.0.1:8080").to_string(), "127.0.0.1:8080");
        assert_eq!(parse("[::1]:8080").to_string(), "[::1]:8080");
        assert_eq!(parse("[::1]").to_string(), "[::1]");
        for (bad, says) in [
            ("", "is empty"),
            ("https://api.example.com", "no scheme"),
            ("api.example.com/v1", "no scheme, path"),
            ("host:0", "from 1 to 65535"),
            ("host:http", "from 1 to 65535"),
            ("::1", "in brackets"),
            ("[::1", "closing"),
            ("bad host", "not a valid host"),
        ] {
            let error = AllowedHost::parse(bad).unwrap_err();
            assert!(error.to_string().contains(says), "{bad:?}: {error}");
        }
    }

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
}
