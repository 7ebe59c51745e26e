//! TLS for the store's connections, over rustls: libpq's `sslmode` and
//! `sslrootcert`, read from the URL by `conn::Target::parse` and turned
//! here into one connector that every connection of the store uses (the
//! pool's, the listener's, the side ones, and each reconnection).
//!
//! | `sslmode`          | TLS                     | certificate check                |
//! |--------------------|-------------------------|----------------------------------|
//! | `disable`          | never                   | -                                |
//! | `prefer` (default) | if the server offers it | none                             |
//! | `require`          | always                  | none (chain, with `sslrootcert`) |
//! | `verify-ca`        | always                  | chain                            |
//! | `verify-full`      | always                  | chain and host name              |
//!
//! `prefer` also connects without TLS when the server offers it but the
//! handshake fails (as libpq; `Tls::connect`).
//!
//! "None" still checks the handshake's signatures against the certificate's
//! key: the connection is encrypted, but a man in the middle with a
//! certificate of its own is not detected. The chain is checked against
//! `sslrootcert` (a PEM file of CA certificates) or, without it, against
//! the system's roots (`rustls-native-certs`: what the operator installed,
//! private CAs included, as libpq's `sslrootcert=system`; a compiled-in
//! Mozilla list such as `webpki-roots` would refuse a company CA and go
//! stale). Unlike libpq, no `~/.postgresql/root.crt` is read unasked.

use std::fmt;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres_rustls::MakeRustlsConnect;

/// A connection's I/O (to be polled, or spawned, until it ends).
pub(super) type Session = tokio_postgres::Connection<
    tokio_postgres::Socket,
    <MakeRustlsConnect as MakeTlsConnect<tokio_postgres::Socket>>::Stream,
>;

/// libpq's `sslmode`, all five values (tokio-postgres knows three).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    /// Parses a `sslmode` value; `None` for an unknown one.
    pub fn parse(value: &str) -> Option<SslMode> {
        Some(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    /// The value as written in a URL.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: whether to ask for TLS and whether to
    /// give up without it (the certificate check is the connector's).
    pub fn for_tokio_postgres(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as T;
        match self {
            SslMode::Disable => T::Disable,
            SslMode::Prefer => T::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => T::Require,
        }
    }
}

/// Where `verify-ca`/`verify-full` find their roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum RootCert {
    /// `sslrootcert=/path/ca.pem`: the CA certificates in that PEM file.
    File(String),
    /// `sslrootcert=system`, or none given: the system's store.
    System,
}

/// The TLS connector of a store: built once from the URL, cloned into
/// every connection attempt.
#[derive(Clone)]
pub(super) struct Tls {
    mode: SslMode,
    /// What the chain is checked against, for messages (`None`: no check).
    roots: Option<String>,
    connector: MakeRustlsConnect,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("mode", &self.mode).finish()
    }
}

impl Tls {
    /// The connector for `mode` (libpq's meaning: `require` with a root
    /// certificate given checks the chain, as `verify-ca`). The error says
    /// what is wrong with `sslrootcert` (or the system's roots), for
    /// [`Error::UnsupportedStore`](crate::Error::UnsupportedStore).
    pub fn new(mode: SslMode, root: Option<&RootCert>) -> Result<Tls, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let algorithms = provider.signature_verification_algorithms;
        let verifier: Arc<dyn ServerCertVerifier> = match (mode, root) {
            (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => {
                Arc::new(Unverified { algorithms })
            }
            (SslMode::Require | SslMode::VerifyCa, root) => Arc::new(ChainOnly {
                roots: Arc::new(load_roots(root.unwrap_or(&RootCert::System))?),
                algorithms,
            }),
            (SslMode::VerifyFull, root) => {
                let roots = Arc::new(load_roots(root.unwrap_or(&RootCert::System))?);
                WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(|e| format!("cannot check certificates: {e}"))?
            }
        };
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        let roots = match (mode, root) {
            (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => None,
            (_, Some(RootCert::File(path))) => Some(format!("the CA certificates of `{path}`")),
            (_, _) => Some("the system's root certificates".to_owned()),
        };
        Ok(Tls {
            mode,
            roots,
            connector: MakeRustlsConnect::new(config),
        })
    }

    /// For a connection refused over the server's certificate, what was
    /// checked, as `" (...)"` to append to the error; else empty.
    pub fn explain(&self, e: &tokio_postgres::Error) -> String {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
        let refused = std::iter::from_fn(|| {
            let now = source?;
            source = now.source();
            Some(now)
        })
        .find_map(|e| {
            let e = e.downcast_ref::<std::io::Error>()?.get_ref()?;
            match e.downcast_ref::<rustls::Error>()? {
                rustls::Error::InvalidCertificate(c) => Some(c.clone()),
                _ => None,
            }
        });
        let (Some(refused), Some(roots)) = (refused, &self.roots) else {
            return String::new();
        };
        let mode = self.mode.as_str();
        match refused {
            rustls::CertificateError::UnknownIssuer | rustls::CertificateError::BadSignature => {
                format!(" (sslmode={mode}: the server's certificate is not signed by {roots})")
            }
            rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. } => {
                " (sslmode=verify-full: the server's certificate does not name the host; \
                 connect by a name it holds, or use sslmode=verify-ca)"
                    .to_owned()
            }
            _ => format!(" (sslmode={mode}, checked against {roots})"),
        }
    }

    /// Connects with `config` (whose `ssl_mode` came from this `sslmode`).
    /// As libpq, `prefer` tries once more without TLS when the TLS
    /// handshake failed (a server whose TLS this client cannot speak is
    /// still reached, as it was by a client without TLS).
    pub async fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<(tokio_postgres::Client, Session), tokio_postgres::Error> {
        use tokio_postgres::config::SslMode as Told;
        match config.connect(self.connector.clone()).await {
            // tokio-postgres shows no error kind but in words: this is its
            // `Kind::Tls`, a failed handshake (a server without TLS was
            // already taken as plain by `prefer`).
            Err(e)
                if config.get_ssl_mode() == Told::Prefer
                    && e.to_string().starts_with("error performing TLS handshake") =>
            {
                let mut plain = config.clone();
                plain.ssl_mode(Told::Disable);
                plain.connect(self.connector.clone()).await
            }
            other => other,
        }
    }
}

/// The root certificates of `root`.
fn load_roots(root: &RootCert) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    match root {
        RootCert::File(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| format!("invalid sslrootcert `{path}`: cannot read it: {e}"))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| {
                    format!("invalid sslrootcert `{path}`: not PEM certificates: {e}")
                })?;
                roots.add(cert).map_err(|e| {
                    format!("invalid sslrootcert `{path}`: not a usable CA certificate: {e}")
                })?;
            }
            if roots.is_empty() {
                return Err(format!(
                    "invalid sslrootcert `{path}`: no PEM certificate (-----BEGIN CERTIFICATE-----) in it"
                ));
            }
        }
        RootCert::System => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                let why = found
                    .errors
                    .first()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default();
                return Err(format!(
                    "no root certificates in the system's store{why} to check the server's \
                     certificate: give `sslrootcert=/path/ca.pem`"
                ));
            }
        }
    }
    Ok(roots)
}

/// `verify-ca`: the chain up to a root, not the host name.
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<RootCertStore>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algorithms.all,
        )?;
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

/// `prefer` and `require` without a root certificate: any certificate is
/// taken (self-signed included), but the handshake must be signed with its
/// key, so the session is encrypted to whoever holds that key.
#[derive(Debug)]
struct Unverified {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Unverified {
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
    use super::super::conn::Target;
    use super::SslMode;
    use crate::Error;
    use tokio_postgres::config::SslMode as Told;

    fn refused(url: &str) -> String {
        match Target::parse(url, None) {
            Err(e @ Error::UnsupportedStore { .. }) => e.to_string(),
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn sslmode_is_read_with_libpqs_meaning() {
        let t = Target::parse("postgres://u@h/db", None).unwrap();
        assert_eq!(
            (t.tls.mode, t.config.get_ssl_mode()),
            (SslMode::Prefer, Told::Prefer)
        );
        for (v, mode, told) in [
            ("disable", SslMode::Disable, Told::Disable),
            ("prefer", SslMode::Prefer, Told::Prefer),
            ("require", SslMode::Require, Told::Require),
        ] {
            let t = Target::parse(&format!("postgres://u@h/db?sslmode={v}"), None).unwrap();
            assert_eq!((t.tls.mode, t.config.get_ssl_mode()), (mode, told), "{v}");
        }
        // A key=value string, with this backend's own pairs among the rest.
        let t = Target::parse(
            "host=h user=u sslmode = require schema='s_1' dbname=db",
            None,
        )
        .unwrap();
        assert_eq!(t.tls.mode, SslMode::Require);
        assert_eq!(t.schema.as_deref(), Some("s_1"));
        assert_eq!(t.config.get_dbname(), Some("db"));
        // Over a Unix-domain socket `sslmode` does not apply (as libpq).
        let t = Target::parse("postgres://u@%2Ftmp/db?sslmode=require", None).unwrap();
        assert_eq!(t.config.get_ssl_mode(), Told::Disable);
    }

    #[test]
    fn bad_tls_parameters_are_refused_before_connecting() {
        let err = refused("postgres://u:pw@h/db?sslmode=bogus");
        assert!(err.contains("invalid sslmode `bogus`"), "{err}");
        assert!(!err.contains("pw@"), "{err}");
        let err = refused("host=h sslmode=Verify-Full");
        assert!(err.contains("invalid sslmode `Verify-Full`"), "{err}");
        // Percent-decoded in a URL, unquoted in a key=value string.
        for url in [
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=%2Fno%20such%2Fca.pem",
            "host=h sslmode=verify-ca sslrootcert='/no such/ca.pem'",
            "postgres://u@h/db?sslmode=require&sslrootcert=/no%20such/ca.pem",
        ] {
            let err = refused(url);
            assert!(
                err.contains("invalid sslrootcert `/no such/ca.pem`: cannot read it"),
                "{err}"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        for (name, text, says) in [
            ("empty.pem", "", "no PEM certificate"),
            ("junk.pem", "not a certificate\n", "no PEM certificate"),
            (
                "bad.pem",
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                "not a usable CA certificate",
            ),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            let err = refused(&format!(
                "postgres://u@h/db?sslmode=verify-full&sslrootcert={}",
                path.display()
            ));
            assert!(
                err.contains("invalid sslrootcert `") && err.contains(says),
                "{err}"
            );
        }
        let err = refused("postgres://u@h/db?sslmode=require&sslrootcert=system");
        assert!(
            err.contains("sslmode `require` may not be used with sslrootcert=system"),
            "{err}"
        );
        let err = refused("postgres://u@h/db?sslmode=verify-full&sslcert=/c.pem&sslkey=/k.pem");
        assert!(err.contains("`sslcert` is not supported"), "{err}");
        let err = refused("host=h user=u sslpassword='s3 cret'");
        assert!(err.contains("`sslpassword` is not supported"), "{err}");
        assert!(!err.contains("s3"), "{err}");
        let err = refused("postgres://u@h/db?sslrootcert=");
        assert!(err.contains("invalid sslrootcert ``"), "{err}");
        // `prefer` checks no certificate, so it reads no file (as libpq).
        assert!(Target::parse("postgres://u@h/db?sslrootcert=/no/such.pem", None).is_ok());
    }

    #[test]
    fn redaction_keeps_tls_parameters_and_hides_the_password() {
        let url = "postgres://u:pw@h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem&password=x";
        assert_eq!(
            crate::store::redact_url(url),
            "postgres://u:***@h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem&password=***"
        );
    }

    /// Over the connections the store opens (`conn::connect`): TLS is
    /// used as `sslmode` says. Only opens sessions on the test server (it
    /// changes nothing there); the server's own certificate, whatever it
    /// is, is accepted by `require`.
    #[tokio::test]
    #[cfg_attr(
        not(checkpoint_test_postgres),
        ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set"
    )]
    async fn connections_use_tls_as_sslmode_says() {
        let Ok(base) = std::env::var("CHECKPOINT_TEST_POSTGRES_URL") else {
            eprintln!("skipped: CHECKPOINT_TEST_POSTGRES_URL is not set");
            return;
        };
        let handle = tokio::runtime::Handle::current();
        let probe = |mode: &'static str| {
            let sep = if base.contains('?') { '&' } else { '?' };
            let url = format!("{base}{sep}sslmode={mode}");
            let handle = handle.clone();
            async move {
                let target = Target::parse(&url, None).unwrap();
                let client = super::super::conn::connect(&handle, &target).await?;
                let row = client
                    .query_one(
                        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                        &[],
                    )
                    .await
                    .map_err(super::super::conn::db_err)?;
                Ok::<bool, Error>(row.get(0))
            }
        };
        let server_has_tls = match probe("require").await {
            Ok(ssl) => {
                assert!(ssl, "sslmode=require connected without TLS");
                true
            }
            Err(e) => {
                assert!(e.to_string().contains("server does not support TLS"), "{e}");
                false
            }
        };
        assert!(!probe("disable").await.unwrap(), "sslmode=disable used TLS");
        assert_eq!(
            probe("prefer").await.unwrap(),
            server_has_tls,
            "sslmode=prefer"
        );
    }
}
