//! `accounts[].allow_hosts`: the only hosts an account's resources may
//! connect to. A tenant otherwise chooses any address for its database,
//! its HTTP endpoints, its sinks' brokers and its functions' HTTP grants,
//! which lets it reach the operator's internal services or another
//! tenant's broker from weft's network position.
//!
//! Hosts are compared as written (after the normalisation URLs apply:
//! lower case, IDNA), not resolved: list the names the tenant uses, and
//! keep DNS for those names under the operator's control.
//!
//! `accounts[].deny_internal_http` is enforced on resolved addresses at
//! run time (`weft_wasm::http_egress`); here it only refuses HTTP targets
//! written as internal addresses, which could never be reached.

use super::Config;
use super::account::AccountConfig;
use super::destination::Destination;
use super::hosts::{AllowedHost, HostError, internal_ip};
use super::path::DocPath;

/// Each connection of `account`'s resources in `config` that its
/// `allow_hosts` does not allow, as (where it is configured, why it is
/// refused); none when the account sets no `allow_hosts`. Entries of
/// `allow_hosts` that do not parse are reported by the caller and allow
/// nothing here.
pub(crate) fn refused_connections<D: Destination>(
    config: &Config<D>,
    account: &AccountConfig,
    root: &DocPath,
) -> Vec<(DocPath, String)> {
    let Some(entries) = &account.allow_hosts else {
        return Vec::new();
    };
    let allowed: Vec<AllowedHost> = entries
        .iter()
        .filter_map(|entry| AllowedHost::parse(entry).ok())
        .collect();
    let owned = |owner: &Option<String>| owner.as_deref() == Some(account.name.as_str());
    let mut refused = Vec::new();
    let mut check = |at: DocPath, target: Result<AllowedHost, HostError>| {
        match target {
        Ok(target) if allowed.iter().any(|entry| entry.covers(&target)) => {}
        Ok(target) => refused.push((
            at,
            format!(
                "`{target}` is not in account {:?}'s allow_hosts; its resources may connect only to the hosts listed there: connect to one of them, or have the operator add this one",
                account.name
            ),
        )),
        Err(reason) => refused.push((
            at,
            format!(
                "cannot be checked against account {:?}'s allow_hosts: {reason}",
                account.name
            ),
        )),
    }
    };

    for (i, database) in config.databases.iter().enumerate() {
        if !owned(&database.account) {
            continue;
        }
        let connection = database.connection();
        let target = if connection.host.starts_with('/') {
            Err(HostError(format!(
                "it connects through the Unix socket in {}, which reaches this machine's own server; connect over TCP to a listed host",
                connection.host
            )))
        } else {
            AllowedHost::address(&connection.host, connection.port)
        };
        check(root.key("databases").index(i), target);
    }
    for (i, endpoint) in config.http_endpoints.iter().enumerate() {
        if !owned(&endpoint.account) {
            continue;
        }
        let target = url::Url::parse(&endpoint.url)
            .map_err(|error| HostError(format!("the url does not parse: {error}")))
            .and_then(|url| {
                let host = url
                    .host_str()
                    .ok_or_else(|| HostError("the url has no host".into()))?;
                let port = url.port_or_known_default().ok_or_else(|| {
                    HostError("the url names no port and its scheme has no default".into())
                })?;
                AllowedHost::address(host, port)
            });
        check(root.key("http_endpoints").index(i).key("url"), target);
    }
    for (i, sink) in config.sinks.iter().enumerate() {
        if !owned(&sink.account) {
            continue;
        }
        let at = root.key("sinks").index(i).key("destination");
        for (field, target) in sink.destination.egress_targets() {
            check(at.key(field), target);
        }
    }
    for (at, entry) in http_grant_entries(config, account, root) {
        // Entries that do not parse are reported with the grant's checks.
        if let Ok(grant) = AllowedHost::parse(entry) {
            check(at, Ok(grant));
        }
    }
    refused
}

/// Each `grants.http.allow_hosts` entry of `account`'s functions in
/// `config`, with where it is configured.
fn http_grant_entries<'a, D>(
    config: &'a Config<D>,
    account: &'a AccountConfig,
    root: &'a DocPath,
) -> impl Iterator<Item = (DocPath, &'a str)> + 'a {
    config
        .functions
        .iter()
        .enumerate()
        .filter(|(_, function)| function.account.as_deref() == Some(account.name.as_str()))
        .filter_map(|(i, function)| Some((i, function.grants.http.as_ref()?)))
        .flat_map(move |(i, http)| {
            let at = root
                .key("functions")
                .index(i)
                .key("grants")
                .key("http")
                .key("allow_hosts");
            http.allow_hosts
                .iter()
                .enumerate()
                .map(move |(j, entry)| (at.index(j), entry.as_str()))
        })
}

/// Each HTTP target of `account`'s resources in `config` written as an
/// internal IP address, when the account sets `deny_internal_http`, as
/// (where it is configured, why it is refused).
pub(crate) fn internal_http_targets<D>(
    config: &Config<D>,
    account: &AccountConfig,
    root: &DocPath,
) -> Vec<(DocPath, String)> {
    if !account.deny_internal_http {
        return Vec::new();
    }
    let owned = |owner: &Option<String>| owner.as_deref() == Some(account.name.as_str());
    let refuse = |ip: std::net::IpAddr| {
        format!(
            "`{ip}` is an internal address, and account {:?} sets `deny_internal_http: true`, so its HTTP requests go to public addresses only: use a host with a public address, or unset deny_internal_http",
            account.name
        )
    };
    let mut refused = Vec::new();
    for (i, endpoint) in config.http_endpoints.iter().enumerate() {
        let host = url::Url::parse(&endpoint.url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_string));
        if let Some(ip) = host.as_deref().and_then(internal_ip)
            && owned(&endpoint.account)
        {
            refused.push((root.key("http_endpoints").index(i).key("url"), refuse(ip)));
        }
    }
    for (at, entry) in http_grant_entries(config, account, root) {
        if let Some(ip) = AllowedHost::parse(entry)
            .ok()
            .and_then(|grant| internal_ip(grant.host()))
        {
            refused.push((at, refuse(ip)));
        }
    }
    refused
}
