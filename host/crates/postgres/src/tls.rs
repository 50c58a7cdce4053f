//! TLS for both connections to the source: `sslmode` as libpq reads it,
//! certificate verification with rustls (the `ring` provider).
//!
//! | `sslmode`     | TLS                    | certificate checked                     |
//! |---------------|------------------------|-----------------------------------------|
//! | `disable`     | never                  | -                                       |
//! | `allow`       | only if plain is refused | no                                    |
//! | `prefer`      | if the server offers it | no                                     |
//! | `require`     | always                 | no; chain only when `sslrootcert` is set (as libpq) |
//! | `verify-ca`   | always                 | chain to `sslrootcert`                  |
//! | `verify-full` | always                 | chain to `sslrootcert` and the host name |
//!
//! The default, as in libpq, is `prefer`. `sslcert`/`sslkey` add a client
//! certificate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

/// How hard to insist on TLS, as libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// Plain TCP only.
    Disable,
    /// Plain first; TLS only when the server refuses plain connections.
    Allow,
    /// TLS when the server offers it, else plain (libpq's default).
    #[default]
    Prefer,
    /// TLS always; the certificate is checked only if `sslrootcert` is set.
    Require,
    /// TLS always; the certificate must chain to `sslrootcert`.
    VerifyCa,
    /// Like `VerifyCa`, and the certificate must name the host.
    VerifyFull,
}

impl SslMode {
    /// Parses a libpq `sslmode` value.
    pub fn parse(text: &str) -> Result<SslMode, String> {
        Ok(match text {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }

    /// Whether a plain connection is unacceptable.
    pub fn requires_tls(self) -> bool {
        matches!(
            self,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
        )
    }

    /// The libpq spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// Whether SCRAM authentication binds to the TLS channel, as libpq's
/// `channel_binding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChannelBindingMode {
    /// Never bind.
    Disable,
    /// Bind when TLS is used and the server offers SCRAM-SHA-256-PLUS.
    #[default]
    Prefer,
    /// Refuse to authenticate without channel binding.
    Require,
}

/// The TLS settings of a connection: `sslmode`, `sslrootcert`, `sslcert`,
/// `sslkey` and `channel_binding` from the URL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsOptions {
    /// How hard to insist on TLS.
    pub mode: SslMode,
    /// PEM file of the CA certificate(s) that sign the server's certificate.
    pub root_cert: Option<PathBuf>,
    /// PEM file of a client certificate (chain).
    pub client_cert: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    pub client_key: Option<PathBuf>,
    /// SCRAM channel binding.
    pub channel_binding: ChannelBindingMode,
}

impl TlsOptions {
    /// Reads the `ssl*` parameters of a connection URL. Unknown `ssl*`
    /// parameters are refused rather than ignored: ignoring one could
    /// weaken the connection silently.
    pub fn from_params(params: &[(String, String)]) -> Result<TlsOptions, String> {
        let mut options = TlsOptions::default();
        for (key, value) in params {
            match key.as_str() {
                "sslmode" => options.mode = SslMode::parse(value)?,
                "sslrootcert" => options.root_cert = Some(PathBuf::from(value)),
                "sslcert" => options.client_cert = Some(PathBuf::from(value)),
                "sslkey" => options.client_key = Some(PathBuf::from(value)),
                "sslnegotiation" if value == "postgres" => {}
                "channel_binding" => {
                    options.channel_binding = match value.as_str() {
                        "disable" => ChannelBindingMode::Disable,
                        "prefer" => ChannelBindingMode::Prefer,
                        "require" => ChannelBindingMode::Require,
                        other => {
                            return Err(format!(
                                "channel_binding={other} is not one of disable, prefer, require"
                            ));
                        }
                    }
                }
                other if other.starts_with("ssl") => {
                    return Err(format!(
                        "the connection parameter {other} is not supported; weft reads sslmode, \
                         sslrootcert, sslcert and sslkey"
                    ));
                }
                _ => {}
            }
        }
        if options.channel_binding == ChannelBindingMode::Require
            && options.mode == SslMode::Disable
        {
            return Err(
                "channel_binding=require needs TLS, but sslmode=disable: use sslmode=verify-full"
                    .into(),
            );
        }
        if options.client_cert.is_some() != options.client_key.is_some() {
            return Err("sslcert and sslkey go together: set both or neither".into());
        }
        if matches!(options.mode, SslMode::VerifyCa | SslMode::VerifyFull)
            && options.root_cert.is_none()
        {
            return Err(format!(
                "sslmode={} needs sslrootcert=<path to the CA certificate (PEM)> to check the \
                 server's certificate against",
                options.mode.as_str()
            ));
        }
        Ok(options)
    }

    /// The rustls client configuration for these options.
    pub fn client_config(&self, host: &str) -> Result<ClientConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let verify = match (&self.root_cert, self.mode) {
            (Some(path), SslMode::VerifyFull) => Verify::Full(load_roots(path)?),
            (Some(path), SslMode::VerifyCa | SslMode::Require) => Verify::Chain(load_roots(path)?),
            _ => Verify::Nothing,
        };
        let verifier: Arc<dyn ServerCertVerifier> = match verify {
            Verify::Full(roots) => WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?,
            Verify::Chain(roots) => Arc::new(ChainOnly {
                inner: WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(|e| TlsError::Config(e.to_string()))?,
            }),
            Verify::Nothing => Arc::new(AnyCertificate {
                algorithms: provider.signature_verification_algorithms,
            }),
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let chain = load_certs(cert)?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::File {
                    path: key.clone(),
                    what: "sslkey",
                    reason: e.to_string(),
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| TlsError::Config(format!("the client certificate: {e}")))?
            }
            _ => builder.with_no_client_auth(),
        };
        config.enable_sni = host.parse::<std::net::IpAddr>().is_err();
        Ok(config)
    }

    /// The name the server's certificate must carry.
    pub fn server_name(host: &str) -> Result<ServerName<'static>, TlsError> {
        ServerName::try_from(host.to_string()).map_err(|_| {
            TlsError::Config(format!(
                "{host:?} is not a valid host name or IP address for TLS"
            ))
        })
    }
}

enum Verify {
    Full(Arc<RootCertStore>),
    Chain(Arc<RootCertStore>),
    Nothing,
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_error = |reason: String| TlsError::File {
        path: path.to_path_buf(),
        what: "certificate",
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error("it holds no PEM certificate".into()));
    }
    Ok(certs)
}

fn load_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| TlsError::File {
            path: path.to_path_buf(),
            what: "sslrootcert",
            reason: e.to_string(),
        })?;
    }
    Ok(Arc::new(roots))
}

/// What went wrong setting up or negotiating TLS; the message names the fix.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read.
    #[error("cannot use {what} file {path:?}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Which parameter named it.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The TLS configuration is unusable.
    #[error("invalid TLS settings: {0}")]
    Config(String),
}

/// The `tls-server-end-point` channel binding data (RFC 5929) for the
/// server's certificate: its hash with the certificate's signature hash
/// (SHA-1 and MD5 become SHA-256). `None` when the certificate cannot be
/// parsed or its signature algorithm names no hash (e.g. Ed25519).
pub fn server_end_point(certificate: &[u8]) -> Option<Vec<u8>> {
    use sha2::Digest;
    use x509_cert::der::Decode;
    use x509_cert::der::oid::db::rfc5912 as oid;
    let parsed = x509_cert::Certificate::from_der(certificate).ok()?;
    let algorithm = parsed.signature_algorithm.oid;
    let sha256 = [
        oid::SHA_1_WITH_RSA_ENCRYPTION,
        oid::SHA_256_WITH_RSA_ENCRYPTION,
        oid::ECDSA_WITH_SHA_256,
        oid::ID_SHA_1,
        oid::ID_SHA_256,
        oid::MD_5_WITH_RSA_ENCRYPTION,
    ];
    let sha384 = [
        oid::SHA_384_WITH_RSA_ENCRYPTION,
        oid::ECDSA_WITH_SHA_384,
        oid::ID_SHA_384,
    ];
    let sha512 = [
        oid::SHA_512_WITH_RSA_ENCRYPTION,
        oid::ECDSA_WITH_SHA_512,
        oid::ID_SHA_512,
    ];
    if sha256.contains(&algorithm) {
        Some(sha2::Sha256::digest(certificate).to_vec())
    } else if sha384.contains(&algorithm) {
        Some(sha2::Sha384::digest(certificate).to_vec())
    } else if sha512.contains(&algorithm) {
        Some(sha2::Sha512::digest(certificate).to_vec())
    } else {
        None
    }
}

/// Explains a failed handshake: the rustls error found in `error`'s chain,
/// turned into what to change. `None` when the error is not a TLS one.
pub fn explain_handshake(
    error: &(dyn std::error::Error + 'static),
    host: &str,
    options: &TlsOptions,
) -> Option<String> {
    let rustls_error = find_rustls_error(error)?;
    let root = options
        .root_cert
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    Some(match rustls_error {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
            "the server's certificate is not signed by a CA in sslrootcert={root}: point \
             sslrootcert at the CA certificate that signed the server's certificate"
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => format!(
            "the server's certificate is not valid for host {host:?}: connect with a host name \
             the certificate lists, or use sslmode=verify-ca to check only the CA"
        ),
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "the server's certificate has expired: renew it on the server".into(),
        rustls::Error::InvalidCertificate(other) => format!(
            "the server's certificate was rejected ({other:?}): check the server's ssl_cert_file \
             and sslrootcert={root}"
        ),
        other => format!("TLS handshake failed: {other}"),
    })
}

fn find_rustls_error<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::Error> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(found) = inner.downcast_ref::<rustls::Error>()
        {
            return Some(found);
        }
        current = e.source();
    }
    None
}

/// `verify-ca` (and `require` with `sslrootcert`): the chain must verify,
/// the host name need not match.
#[derive(Debug)]
struct ChainOnly {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `prefer`/`allow`/`require` without `sslrootcert`: encryption without
/// authentication of the server, as libpq does. The handshake signatures
/// are still checked, so the session is bound to the presented key.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_libpq_parameters() {
        assert_eq!(TlsOptions::from_params(&[]).unwrap().mode, SslMode::Prefer);
        let o = TlsOptions::from_params(&params(&[
            ("sslmode", "verify-full"),
            ("sslrootcert", "/ca.pem"),
            ("application_name", "x"),
        ]))
        .unwrap();
        assert_eq!(o.mode, SslMode::VerifyFull);
        assert_eq!(o.root_cert.as_deref(), Some(Path::new("/ca.pem")));
        let e = TlsOptions::from_params(&params(&[("sslmode", "verify-ca")])).unwrap_err();
        assert!(e.contains("sslrootcert"), "{e}");
        let e = TlsOptions::from_params(&params(&[("sslmode", "on")])).unwrap_err();
        assert!(e.contains("verify-full"), "{e}");
        let e = TlsOptions::from_params(&params(&[("sslcert", "/c.pem")])).unwrap_err();
        assert!(e.contains("sslkey"), "{e}");
        let e = TlsOptions::from_params(&params(&[("sslcrl", "/crl.pem")])).unwrap_err();
        assert!(e.contains("sslcrl"), "{e}");
    }

    #[test]
    fn a_missing_root_file_is_named() {
        let o = TlsOptions::from_params(&params(&[
            ("sslmode", "verify-full"),
            ("sslrootcert", "/nonexistent/ca.pem"),
        ]))
        .unwrap();
        let e = o.client_config("db").unwrap_err().to_string();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }
}
