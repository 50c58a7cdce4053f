//! Postgres connection URLs (`postgres://user:password@host:port/db?k=v`),
//! as libpq reads them, minus multi-host lists.
//!
//! Errors never repeat the URL: it may hold a password.

use super::model::PgConnection;

/// A database URL that does not parse; it says what is wrong, and never
/// repeats the URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UrlError(pub String);

impl PgConnection {
    /// Parses a `postgres://` or `postgresql://` URL as libpq reads it.
    /// The error never repeats the URL, which may hold a password.
    pub fn from_url(url: &str) -> Result<PgConnection, UrlError> {
        parse(url).map_err(UrlError)
    }
}

/// The default Postgres port.
pub(crate) const DEFAULT_PORT: u16 = 5432;
/// The role used when none is given, as in Sequin.
pub(crate) const DEFAULT_USER: &str = "postgres";

/// Parses a connection URL. `user`, `password`, `host`, `port` and `dbname`
/// query parameters override the URL's parts, as in libpq; other parameters
/// (such as `sslmode`) are kept in [`PgConnection::params`].
pub(crate) fn parse(url: &str) -> Result<PgConnection, String> {
    let rest = ["postgres://", "postgresql://"]
        .iter()
        .find_map(|scheme| {
            url.get(..scheme.len())
                .filter(|prefix| prefix.eq_ignore_ascii_case(scheme))
                .map(|_| &url[scheme.len()..])
        })
        .ok_or("must start with postgres:// or postgresql://")?;

    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((authority, path)) => (authority, path),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((userinfo, hostport)) => (Some(userinfo), hostport),
        None => (None, authority),
    };

    let (mut user, mut password) = (None, None);
    if let Some(userinfo) = userinfo {
        let (u, p) = match userinfo.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (userinfo, None),
        };
        user = Some(decode(u, "user name")?).filter(|u| !u.is_empty());
        password = p.map(|p| decode(p, "password")).transpose()?;
    }

    if hostport.contains(',') {
        return Err("lists several hosts; weft connects to exactly one".into());
    }
    let (host, port) = split_host_port(hostport)?;
    let mut host = decode(host, "host")?;
    let mut port = port.map(parse_port).transpose()?;
    let mut database = decode(path, "database name")?;

    let mut params = Vec::new();
    for pair in query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("query parameter `{pair}` has no `=value`"))?;
        let key = decode(key, "query parameter name")?;
        let value = decode(value, "query parameter value")?;
        match key.as_str() {
            "host" => host = value,
            "port" => port = Some(parse_port(&value)?),
            "user" => user = Some(value),
            "password" => password = Some(value),
            "dbname" => database = value,
            _ => params.push((key, value)),
        }
    }

    if host.is_empty() {
        return Err("has no host; write postgres://user:password@host:port/database".into());
    }
    if database.is_empty() {
        return Err(
            "has no database name; add it after the host, as in postgres://host:5432/mydb".into(),
        );
    }
    Ok(PgConnection {
        host,
        port: port.unwrap_or(DEFAULT_PORT),
        user: user.unwrap_or_else(|| DEFAULT_USER.to_owned()),
        password,
        database,
        params,
    })
}

/// Splits `host:port`, `[v6]:port`, `host` or `[v6]`.
fn split_host_port(hostport: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or("has an IPv6 host without its closing `]`")?;
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err("has text after the IPv6 host's `]` that is not `:port`".into()),
            },
        };
    }
    Ok(match hostport.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (hostport, None),
    })
}

fn parse_port(port: &str) -> Result<u16, String> {
    match port.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(format!(
            "has port {port:?}; a port is a number from 1 to 65535"
        )),
    }
}

/// Percent-decodes one URL part.
fn decode(text: &str, what: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    format!("has a bad percent-escape in its {what}; `%` must be followed by two hex digits (write `%25` for `%`)")
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("has a {what} that is not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_url_with_encoded_credentials_and_params() {
        let c = parse("postgresql://app%40corp:p%40ss%3Aw%2Frd@db.example.com:6432/my%20db?sslmode=require&application_name=weft").unwrap();
        assert_eq!(c.host, "db.example.com");
        assert_eq!(c.port, 6432);
        assert_eq!(c.user, "app@corp");
        assert_eq!(c.password.as_deref(), Some("p@ss:w/rd"));
        assert_eq!(c.database, "my db");
        assert_eq!(c.param("sslmode"), Some("require"));
        assert_eq!(c.param("application_name"), Some("weft"));
    }

    #[test]
    fn defaults_port_and_user() {
        let c = parse("postgres://localhost/app").unwrap();
        assert_eq!(
            (c.port, c.user.as_str(), c.password),
            (5432, "postgres", None)
        );
    }

    #[test]
    fn ipv6_host_and_socket_directory() {
        let c = parse("postgres://u@[::1]:5433/app").unwrap();
        assert_eq!((c.host.as_str(), c.port), ("::1", 5433));
        let c = parse("postgres:///app?host=%2Fvar%2Frun%2Fpostgresql").unwrap();
        assert_eq!(c.host, "/var/run/postgresql");
        assert!(c.params.is_empty());
    }

    #[test]
    fn errors_are_precise_and_never_echo_the_password() {
        let cases = [
            (
                "mysql://u:secret@h/db",
                "must start with postgres:// or postgresql://",
            ),
            (
                "postgres://u:secret@/db",
                "has no host; write postgres://user:password@host:port/database",
            ),
            (
                "postgres://u:secret@h:5432",
                "has no database name; add it after the host, as in postgres://host:5432/mydb",
            ),
            (
                "postgres://u:secret@h:99999/db",
                "has port \"99999\"; a port is a number from 1 to 65535",
            ),
            (
                "postgres://u:secret@h1,h2/db",
                "lists several hosts; weft connects to exactly one",
            ),
            (
                "postgres://u:sec%zzret@h/db",
                "has a bad percent-escape in its password; `%` must be followed by two hex digits (write `%25` for `%`)",
            ),
            (
                "postgres://h/db?sslmode",
                "query parameter `sslmode` has no `=value`",
            ),
        ];
        for (url, expected) in cases {
            let error = parse(url).unwrap_err();
            assert_eq!(error, expected, "{url}");
            assert!(!error.contains("secret"));
        }
    }
}
