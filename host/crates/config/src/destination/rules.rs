//! Rules between fields that several destination kinds share, each adding
//! `(field, what is wrong and what to do)` to a kind's problems.

/// A kind's list of problems: (field, what is wrong and what to do).
pub type Problems = Vec<(&'static str, String)>;

/// `username` and `password` are set together; `advice` ends the message
/// (what the pair is for).
pub fn credentials_together(username: bool, password: bool, advice: &str, problems: &mut Problems) {
    match (username, password) {
        (false, true) => {
            problems.push(("password", format!("is set without `username`; {advice}")))
        }
        (true, false) => {
            problems.push(("username", format!("is set without `password`; {advice}")))
        }
        _ => {}
    }
}

/// `tls_ca_file` is read only when `tls` is on.
pub fn ca_file_needs_tls(tls: bool, tls_ca_file: bool, problems: &mut Problems) {
    if tls_ca_file && !tls {
        problems.push((
            "tls_ca_file",
            "is only used over TLS; set `tls: true` too".into(),
        ));
    }
}
