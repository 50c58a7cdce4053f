//! A TLS-terminating TCP proxy on a loopback port: accepts TLS with a test
//! certificate and forwards the plaintext bytes to an upstream port. For
//! servers that cannot serve TLS themselves (tansu 0.6 takes `--cert` and
//! `--key` but never uses them), so that a client's real TLS handshake and
//! certificate verification are still exercised.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::harness::certs::CertFiles;

/// The proxy; it stops when dropped.
pub struct TlsProxy {
    runtime: Option<tokio::runtime::Runtime>,
}

impl TlsProxy {
    /// Listens on `127.0.0.1:port` with `cert` and forwards each connection
    /// to `127.0.0.1:upstream`.
    pub fn start(port: u16, upstream: u16, cert: &CertFiles) -> TlsProxy {
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert.cert)
            .expect("read the proxy certificate")
            .map(|c| c.expect("parse the proxy certificate"))
            .collect();
        let key = PrivateKeyDer::from_pem_file(&cert.key).expect("read the proxy key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("proxy certificate and key");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("proxy runtime");
        let listener = runtime
            .block_on(TcpListener::bind(("127.0.0.1", port)))
            .expect("bind the TLS proxy");
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    // A client that rejects the certificate ends here.
                    let Ok(mut tls) = acceptor.accept(client).await else {
                        return;
                    };
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                });
            }
        });
        TlsProxy {
            runtime: Some(runtime),
        }
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
