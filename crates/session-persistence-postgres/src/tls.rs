//! TLS to the server, as libpq's `sslmode` and `sslrootcert` say, on `rustls` (with `ring`; no
//! system library).
//!
//! | `sslmode` | encrypted | the server's certificate |
//! | --- | --- | --- |
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers it | not checked |
//! | `require` | always | not checked, unless `sslrootcert` is given: then as `verify-ca` |
//! | `verify-ca` | always | chains to a trusted root |
//! | `verify-full` | always | chains to a trusted root and names the host |
//!
//! The trusted roots are the PEM certificates of `sslrootcert=PATH`; `sslrootcert=system` (the
//! default for `verify-full`) trusts the system's (the platform store, or
//! `SSL_CERT_FILE`/`SSL_CERT_DIR`). As in libpq, `verify-ca` needs a file of its own: a check of
//! the chain alone against every public authority would accept any certificate they ever signed.
//! Client certificates (`sslcert`, `sslkey`) are not supported, and a URL that names them is
//! refused.

use std::{fmt, path::PathBuf, sync::Arc};

use rustls::{
    ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    client::{
        WebPkiServerVerifier,
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    },
    crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature},
    pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject},
};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

/// How a connection is encrypted and what of the server's certificate is checked: libpq's
/// `sslmode` values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// Never encrypted.
    Disable,
    /// Encrypted when the server offers it; the certificate is not checked (libpq's default).
    #[default]
    Prefer,
    /// Always encrypted; the certificate is not checked (unless a root certificate is given).
    Require,
    /// Always encrypted; the certificate must chain to a trusted root.
    VerifyCa,
    /// Always encrypted; the certificate must chain to a trusted root and name the host.
    VerifyFull,
}

impl TlsMode {
    /// The mode an `sslmode` value names.
    pub fn parse(value: &str) -> Option<TlsMode> {
        Some(match value {
            "disable" => TlsMode::Disable,
            "prefer" => TlsMode::Prefer,
            "require" => TlsMode::Require,
            "verify-ca" => TlsMode::VerifyCa,
            "verify-full" => TlsMode::VerifyFull,
            _ => return None,
        })
    }

    /// The `sslmode` value.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }

    /// The mode the driver negotiates with: it knows whether to encrypt, not what to check.
    pub(crate) fn negotiation(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode;
        match self {
            TlsMode::Disable => SslMode::Disable,
            TlsMode::Prefer => SslMode::Prefer,
            TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => SslMode::Require,
        }
    }
}

impl fmt::Display for TlsMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The TLS settings of a store: the mode, and the root certificates to trust (`sslrootcert`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    pub(crate) mode: TlsMode,
    pub(crate) root_cert: Option<PathBuf>,
}

impl TlsSettings {
    /// What is checked of the server's certificate: `require` with a root certificate checks
    /// the chain, as libpq does.
    fn checks(&self) -> TlsMode {
        match (self.mode, &self.root_cert) {
            (TlsMode::Require, Some(_)) => TlsMode::VerifyCa,
            (mode, _) => mode,
        }
    }

    /// Why these settings cannot be used, if they cannot: `verify-ca` against the system's roots.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.checks() == TlsMode::VerifyCa && self.system_roots() {
            return Err(format!(
                "sslmode={} checks the certificate's chain but not its name, so it needs the root certificate of \
                 your server's authority: set sslrootcert=PATH (or use sslmode=verify-full to trust the system's \
                 roots)",
                self.mode
            ));
        }
        Ok(())
    }

    /// Whether the trusted roots are the system's.
    fn system_roots(&self) -> bool {
        self.root_cert.as_ref().is_none_or(|path| path.as_os_str() == "system")
    }

    /// The connector for these settings; an error says why it cannot be built (an unreadable
    /// root certificate file, no trusted roots).
    pub(crate) fn connector(&self) -> Result<Connector, String> {
        self.check()?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_details(provider.clone(), Arc::new(ClampedClock))
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("TLS setup: {error}"))?;
        let algorithms = provider.signature_verification_algorithms;
        let verifier: Arc<dyn ServerCertVerifier> = match self.checks() {
            TlsMode::Disable | TlsMode::Prefer | TlsMode::Require => Arc::new(Lenient { chain: None, algorithms }),
            mode @ (TlsMode::VerifyCa | TlsMode::VerifyFull) => {
                let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(self.roots()?), provider)
                    .build()
                    .map_err(|error| format!("TLS setup: {error}"))?;
                if mode == TlsMode::VerifyFull { webpki } else { Arc::new(Lenient { chain: Some(webpki), algorithms }) }
            }
        };
        let config = builder.dangerous().with_custom_certificate_verifier(verifier).with_no_client_auth();
        Ok(Connector(MakeRustlsConnect::new(config)))
    }

    /// The trusted roots: `sslrootcert`'s certificates, else the system's.
    fn roots(&self) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        let certs: Vec<CertificateDer<'static>> = match &self.root_cert {
            _ if self.system_roots() => rustls_native_certs::load_native_certs().certs,
            Some(path) => CertificateDer::pem_file_iter(path).and_then(Iterator::collect).map_err(|error| {
                format!("cannot read the root certificates in sslrootcert={}: {error}", path.display())
            })?,
            None => Vec::new(),
        };
        let (added, _ignored) = roots.add_parsable_certificates(certs);
        if added == 0 {
            let source = match &self.root_cert {
                Some(path) if !self.system_roots() => {
                    format!("sslrootcert={} holds no usable certificate", path.display())
                }
                _ => "the system has no trusted root certificates; name them with sslrootcert=PATH".to_owned(),
            };
            return Err(format!("sslmode={} needs trusted roots: {source}", self.mode));
        }
        Ok(roots)
    }
}

/// The driver's TLS connector: `rustls` with the settings' verifier. A connection over a Unix
/// socket has no host name; the driver never starts TLS on one, but asks for a connector all the
/// same, so a placeholder name stands in for the missing one.
#[derive(Clone)]
pub(crate) struct Connector(MakeRustlsConnect);

impl<S> MakeTlsConnect<S> for Connector
where
    MakeRustlsConnect: MakeTlsConnect<S>,
{
    type Stream = <MakeRustlsConnect as MakeTlsConnect<S>>::Stream;
    type TlsConnect = <MakeRustlsConnect as MakeTlsConnect<S>>::TlsConnect;
    type Error = <MakeRustlsConnect as MakeTlsConnect<S>>::Error;

    fn make_tls_connect(&mut self, hostname: &str) -> Result<Self::TlsConnect, Self::Error> {
        let hostname = if hostname.is_empty() { "unix-socket.invalid" } else { hostname };
        MakeTlsConnect::<S>::make_tls_connect(&mut self.0, hostname)
    }
}

/// The certificate check of every mode but `verify-full`: with `chain`, the certificate must chain
/// to a trusted root and only a name that does not match is forgiven (`verify-ca`); without it,
/// any certificate is accepted (`prefer`, `require`: encrypted, the server not authenticated).
/// The handshake's signatures are always checked.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::{CertificateError, Error};
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(Error::InvalidCertificate(CertificateError::NotValidForName))
            | Err(Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The wall clock rustls checks certificates against, clamped at the epoch: rustls's own reading
/// panics on a system clock before 1970, where this one reads 1970 (with a warning), so a
/// certificate check fails as "not valid yet" instead of the connection's thread panicking.
#[derive(Debug)]
struct ClampedClock;

impl rustls::time_provider::TimeProvider for ClampedClock {
    fn current_time(&self) -> Option<UnixTime> {
        Some(UnixTime::since_unix_epoch(clamped_since_epoch(std::time::SystemTime::now())))
    }
}

/// How long after the epoch `now` is, or zero (with a warning) for a reading before it.
fn clamped_since_epoch(now: std::time::SystemTime) -> std::time::Duration {
    now.duration_since(std::time::UNIX_EPOCH).unwrap_or_else(|_| {
        tracing::warn!("the system clock reads before 1970; TLS certificates are checked as of 1970-01-01");
        std::time::Duration::ZERO
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn a_clock_before_1970_reads_as_the_epoch_not_a_panic() {
        assert_eq!(clamped_since_epoch(UNIX_EPOCH - Duration::from_secs(86_400)), Duration::ZERO);
        assert_eq!(clamped_since_epoch(UNIX_EPOCH + Duration::from_secs(5)), Duration::from_secs(5));
        assert!(rustls::time_provider::TimeProvider::current_time(&ClampedClock).is_some());
    }
}
