//! Throwaway X.509 certificates for TLS tests, made with the `openssl` CLI.
//!
//! [`TestCa::new`] makes a self-signed CA (EC P-256) in a temporary
//! directory; [`TestCa::issue_server`] signs a server certificate for the
//! given subject alternative names.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A certificate authority for one test.
pub struct TestCa {
    dir: tempfile::TempDir,
    name: String,
}

/// A certificate and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The certificate.
    pub cert: PathBuf,
    /// The unencrypted private key.
    pub key: PathBuf,
}

impl TestCa {
    /// Makes a CA called `name` (its common name and file prefix).
    pub fn new(name: &str) -> TestCa {
        let dir = tempfile::Builder::new()
            .prefix("weft-ca-")
            .tempdir()
            .expect("create a directory for the test CA");
        let ca = TestCa {
            dir,
            name: name.to_string(),
        };
        openssl(
            ca.dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
            ],
        );
        ca
    }

    /// The CA certificate (what `sslrootcert` points at).
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// Signs a server certificate with subject alternative names `sans`
    /// (e.g. `["DNS:localhost"]`), files named after `stem`.
    pub fn issue_server(&self, stem: &str, sans: &[&str]) -> CertFiles {
        self.issue(stem, "/CN=weft test server", sans, "serverAuth")
    }

    /// Signs a client certificate whose common name is `user`.
    pub fn issue_client(&self, stem: &str, user: &str) -> CertFiles {
        self.issue(stem, &format!("/CN={user}"), &[], "clientAuth")
    }

    fn issue(&self, stem: &str, subject: &str, sans: &[&str], usage: &str) -> CertFiles {
        let dir = self.dir.path();
        let key = format!("{stem}.key");
        let csr = format!("{stem}.csr");
        let cert = format!("{stem}.crt");
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                subject,
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
        );
        let mut extensions = format!(
            "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n"
        );
        if !sans.is_empty() {
            extensions += &format!("subjectAltName={}\n", sans.join(","));
        }
        let ext_file = format!("{stem}.ext");
        std::fs::write(dir.join(&ext_file), extensions).expect("write the extensions file");
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &ext_file,
                "-out",
                &cert,
            ],
        );
        CertFiles {
            cert: dir.join(cert),
            key: dir.join(key),
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (install the openssl CLI for TLS tests)");
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
