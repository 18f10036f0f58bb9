//! TLS for `rediss://` nodes: which server certificates a client trusts, and the handshake.

use std::sync::Arc;

use crate::config::ClientSettings;
use crate::error::{Error, Result};

use redis::{ErrorKind, RedisError, RedisResult};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

/// The TLS settings of a client's `rediss://` connections.
#[derive(Debug, Clone)]
pub(crate) struct Tls {
    config: Arc<rustls::ClientConfig>,
    /// The authorities given instead of the web's, as PEM (redis-rs connections, which the
    /// deployment check makes, need them too).
    pem: Option<Arc<[u8]>>,
}

impl Tls {
    /// The TLS settings `settings` ask for.
    pub(crate) fn from_settings(settings: &ClientSettings) -> Result<Self> {
        Tls::new(settings.tls_root_certificates.as_deref())
            .map_err(|m| Error::invalid("tls_root_certificates", m))
    }

    /// Trusts the authorities in `pem` (PEM certificates) when given, otherwise the web's root
    /// authorities (webpki-roots), as redis-rs does.
    ///
    /// # Errors
    ///
    /// A message when `pem` holds no certificate, or one that cannot be read.
    pub(crate) fn new(pem: Option<&[u8]>) -> std::result::Result<Self, String> {
        let mut roots = rustls::RootCertStore::empty();
        match pem {
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| format!("is not PEM certificates: {e}"))?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("holds a certificate that cannot be used: {e}"))?;
                }
                if roots.is_empty() {
                    return Err("holds no PEM certificate".to_owned());
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Tls {
            config: Arc::new(config),
            pem: pem.map(Arc::from),
        })
    }

    /// The authorities given instead of the web's, as PEM.
    pub(crate) fn pem(&self) -> Option<&[u8]> {
        self.pem.as_deref()
    }

    /// The TLS handshake with the master at `host` over `tcp`.
    pub(crate) async fn handshake(
        &self,
        host: &str,
        tcp: TcpStream,
    ) -> RedisResult<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "not a TLS server name",
                e.to_string(),
            ))
        })?;
        let connector = tokio_rustls::TlsConnector::from(self.config.clone());
        Ok(connector.connect(name, tcp).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_certificates_are_trusted() {
        assert!(Tls::new(None).is_ok());
        assert!(Tls::new(Some(b"")).unwrap_err().contains("no PEM"));
        assert!(Tls::new(Some(b"not a certificate")).is_err());
        let garbled = b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n";
        assert!(Tls::new(Some(garbled)).is_err());
    }
}
