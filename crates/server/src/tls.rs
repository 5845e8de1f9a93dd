//! TLS for RTSPS and HTTPS (`[tls]`), with rustls.
//!
//! Why: Basic credentials, bearer tokens and the media itself cross the network in the clear
//! otherwise. RTSPS is RTSP 1.0 over TLS on its own listener (`rtsp.rtsps_listen`; RTSP 2.0,
//! RFC 7826 §19.2, names the scheme), with RTP interleaved on the TLS connection (RFC 2326
//! §10.12): a SETUP on it that offers only UDP gets 461, since plain RTP beside an encrypted
//! control connection would leak what TLS hides. HTTPS shares the HTTP port: a connection whose
//! first byte is a TLS handshake record (content type 22, RFC 8446 §5.1) is served over TLS,
//! any other as plain HTTP, so that loopback tools and cluster peers keep working unchanged.
//!
//! The certificate is loaded once, at start; the key never leaves this module's config.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// A certificate or key that cannot be used: the config key that named the file, and what is
/// wrong (the config turns it into its `ConfigError::Invalid`).
#[derive(Debug, thiserror::Error)]
#[error("config key {key}: {message}")]
pub struct TlsError {
    /// `tls.cert_file` or `tls.key_file`.
    pub key: &'static str,
    /// The file and what is wrong with it.
    pub message: String,
}

/// The first byte of a TLS record carrying a handshake (RFC 8446 §5.1, `ContentType` 22).
pub const HANDSHAKE_RECORD: u8 = 0x16;

/// A loaded certificate and key, ready to accept TLS connections.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    /// The certificate file, for messages.
    cert_file: std::path::PathBuf,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("cert_file", &self.cert_file).finish_non_exhaustive()
    }
}

impl Tls {
    /// Loads a PEM certificate chain and its private key.
    ///
    /// # Errors
    ///
    /// [`TlsError`] naming `tls.cert_file` or `tls.key_file`, the file and what is wrong with
    /// it (unreadable, no certificate or key in it, a key that does not match).
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Self, TlsError> {
        let invalid = |key, message: String| TlsError { key, message };
        let certs = CertificateDer::pem_file_iter(cert_file)
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|e| invalid("tls.cert_file", format!("{}: {e}", cert_file.display())))?;
        if certs.is_empty() {
            return Err(invalid(
                "tls.cert_file",
                format!("{}: no certificate (PEM CERTIFICATE block) in it", cert_file.display()),
            ));
        }
        let key = PrivateKeyDer::from_pem_file(key_file)
            .map_err(|e| invalid("tls.key_file", format!("{}: {e}", key_file.display())))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid("tls.cert_file", e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| {
                invalid(
                    "tls.key_file",
                    format!("{} does not go with {}: {e}", key_file.display(), cert_file.display()),
                )
            })?;
        Ok(Self { acceptor: TlsAcceptor::from(Arc::new(config)), cert_file: cert_file.to_owned() })
    }

    /// What accepts TLS connections with this certificate.
    #[must_use]
    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    /// The certificate file.
    #[must_use]
    pub fn cert_file(&self) -> &Path {
        &self.cert_file
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_key_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        let msg = |c: &Path, k: &Path| Tls::load(c, k).unwrap_err().to_string();
        assert!(msg(&cert, &key).contains("tls.cert_file"), "{}", msg(&cert, &key));
        std::fs::write(&cert, "not pem").unwrap();
        assert!(msg(&cert, &key).contains("no certificate"), "{}", msg(&cert, &key));

        let a = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(&cert, a.cert.pem()).unwrap();
        assert!(msg(&cert, &key).contains("tls.key_file"), "{}", msg(&cert, &key));
        std::fs::write(&key, b.signing_key.serialize_pem()).unwrap();
        assert!(msg(&cert, &key).contains("does not go with"), "{}", msg(&cert, &key));
        std::fs::write(&key, a.signing_key.serialize_pem()).unwrap();
        assert_eq!(Tls::load(&cert, &key).unwrap().cert_file(), cert);
    }
}
