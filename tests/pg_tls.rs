//! PostgreSQL over TLS (rustls): libpq's `sslmode` and `sslrootcert`
//! against a throw-away cluster per test (`common::cluster`) with TLS on,
//! its certificate signed by a CA the test makes (rcgen) and valid for the
//! name `localhost` only. On the TLS-only servers TCP without TLS is
//! refused (`hostnossl ... reject`), so a test that gets through also shows
//! that every connection of the store used TLS; the sessions' `pg_stat_ssl`
//! rows, read over the cluster's Unix socket, show it too.
//!
//! Like `restart.rs`, the tests run when `CHECKPOINT_TEST_POSTGRES_URL` is
//! set (they do not use that server) and are ignored otherwise; with the
//! variable set but no server binaries found they print why and pass.
//! `bad_tls_parameters_are_refused_before_connecting` needs no server.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use checkpoint_runtime::prelude::*;
use common::cluster::{Cluster, ServerTls};
use common::pg::URL_VAR;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// Says hello, with a checkpoint in between.
#[workflow]
async fn greet(name: String) -> Result<String, String> {
    let greeting = format!("hello, {name}");
    checkpoint!("greeted");
    Ok(greeting)
}

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("timed out")
}

/// A CA, and a certificate for `localhost` that it signed.
struct Pki {
    dir: common::TempDir,
    /// The CA's certificate (PEM file): the right `sslrootcert`.
    ca: PathBuf,
    /// Another CA's certificate: a wrong `sslrootcert`.
    other_ca: PathBuf,
    server_cert: String,
    server_key: String,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key")).expect("a CA")
}

fn pki(test: &str) -> Pki {
    let dir = common::TempDir::new(test);
    let issuer = ca("checkpoint test CA");
    let other = ca("another test CA");
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params
        .signed_by(&key, &issuer)
        .expect("a server certificate");
    let ca = dir.0.join("ca.pem");
    let other_ca = dir.0.join("other-ca.pem");
    std::fs::write(&ca, issuer.pem()).expect("writing ca.pem");
    std::fs::write(&other_ca, other.pem()).expect("writing other-ca.pem");
    Pki {
        dir,
        ca,
        other_ca,
        server_cert: cert.pem(),
        server_key: key.serialize_pem(),
    }
}

/// A started cluster with TLS on, and its PKI; `None` (the test is
/// skipped, saying why) without `CHECKPOINT_TEST_POSTGRES_URL` or server
/// binaries.
fn tls_server(test: &str, tls_only: bool) -> Option<(Cluster, Pki)> {
    tls_server_with(test, tls_only, "")
}

/// [`tls_server`] with more lines for `postgresql.conf`.
fn tls_server_with(test: &str, tls_only: bool, extra_conf: &str) -> Option<(Cluster, Pki)> {
    if std::env::var_os(URL_VAR).is_none() {
        eprintln!("skipped {test}: {URL_VAR} is not set");
        return None;
    }
    let mut cluster = match Cluster::new() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped {test}: cannot create a throw-away PostgreSQL cluster: {why}");
            return None;
        }
    };
    let pki = pki(test);
    cluster
        .enable_tls(&ServerTls {
            cert_pem: &pki.server_cert,
            key_pem: &pki.server_key,
            tls_only,
            extra_conf,
        })
        .expect("turning TLS on");
    cluster.start();
    Some((cluster, pki))
}

fn url(cluster: &Cluster, host: &str, params: &str) -> String {
    format!(
        "postgres://postgres@{host}:{}/postgres?connect_timeout=10&{params}",
        cluster.port
    )
}

/// How many sessions of `application_name = app` the server has, and how
/// many of them are encrypted: read over the Unix socket.
async fn sessions(cluster: &Cluster, app: &str) -> (i64, i64) {
    let conninfo = format!(
        "host={} port={} user=postgres dbname=postgres",
        cluster.socket_dir().display(),
        cluster.port
    );
    let (client, conn) = tokio_postgres::connect(&conninfo, tokio_postgres::NoTls)
        .await
        .expect("connecting over the Unix socket");
    let task = tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a \
             JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = $1",
            &[&app],
        )
        .await
        .expect("reading pg_stat_ssl");
    drop(client);
    let _ = task.await;
    (row.get(0), row.get(1))
}

/// Opens a runtime on `url`, runs `greet` to completion as run `id`, and
/// checks that the store's sessions (`application_name = app`) are all
/// encrypted.
async fn runs_over_tls(cluster: &Cluster, url: &str, app: &str, id: &str) -> Runtime {
    let rt = within(Runtime::open(url))
        .await
        .unwrap_or_else(|e| panic!("opening {url}: {e}"));
    let h = rt.start(greet, id, id.to_owned()).await.unwrap();
    let out = within(h.result()).await.unwrap();
    assert_eq!(out, Ok(format!("hello, {id}")));
    assert_eq!(
        rt.checkpoints(id).await.unwrap()[0].label.as_deref(),
        Some("greeted")
    );
    let (n, tls) = sessions(cluster, app).await;
    assert!(n >= 1 && tls == n, "{n} sessions of {app}, {tls} over TLS");
    rt
}

/// The error of opening a runtime on `url`, in words.
async fn refused(url: &str) -> String {
    match within(Runtime::open(url)).await {
        Ok(_) => panic!("{url} was accepted"),
        Err(e) => {
            eprintln!("refused as expected: {e}");
            e.to_string()
        }
    }
}

#[tokio::test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set (the test starts a PostgreSQL cluster of its own)"
)]
async fn verify_full_with_the_ca_runs_a_workflow_over_tls() {
    let Some((cluster, pki)) = tls_server("verify_full_ok", true) else {
        return;
    };
    let app = "cp-tls-verify-full";
    let params = format!(
        "sslmode=verify-full&sslrootcert={}&application_name={app}",
        pki.ca.display()
    );
    let rt = runs_over_tls(
        &cluster,
        &url(&cluster, "localhost", &params),
        app,
        "full-1",
    )
    .await;
    drop(rt);
    drop(pki.dir);
}

#[tokio::test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set (the test starts a PostgreSQL cluster of its own)"
)]
async fn reconnects_over_tls_after_a_server_restart() {
    let Some((mut cluster, pki)) = tls_server("tls_restart", true) else {
        return;
    };
    let app = "cp-tls-restart";
    let params = format!(
        "sslmode=verify-full&sslrootcert={}&application_name={app}",
        pki.ca.display()
    );
    let url = url(&cluster, "localhost", &params);
    let rt = runs_over_tls(&cluster, &url, app, "before").await;
    cluster.stop("-INT");
    cluster.start();
    // The pool, the listener and the renewal connection reconnect with the
    // same settings: without TLS the server would refuse them.
    let h = within(async {
        loop {
            match rt.start(greet, "after", "after".to_owned()).await {
                Ok(h) => break h,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    })
    .await;
    assert_eq!(
        within(h.result()).await.unwrap(),
        Ok("hello, after".to_owned())
    );
    let (n, tls) = sessions(&cluster, app).await;
    assert!(
        n >= 1 && tls == n,
        "{n} sessions after the restart, {tls} over TLS"
    );
}

#[tokio::test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set (the test starts a PostgreSQL cluster of its own)"
)]
async fn verify_full_refuses_a_certificate_for_another_name_and_verify_ca_takes_it() {
    let Some((cluster, pki)) = tls_server("tls_names", true) else {
        return;
    };
    let ca = pki.ca.display();
    // The certificate names `localhost`, not `127.0.0.1`.
    let err = refused(&url(
        &cluster,
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await;
    assert!(
        err.contains("cannot connect to `postgres://postgres@127.0.0.1:"),
        "{err}"
    );
    assert!(err.contains("not valid for name"), "{err}");
    assert!(err.contains("127.0.0.1"), "{err}");
    assert!(
        err.contains("(sslmode=verify-full: the server's certificate does not name the host"),
        "{err}"
    );
    // verify-ca checks the chain only; so does require with a root
    // certificate (as libpq).
    let app = "cp-tls-verify-ca";
    for (id, mode) in [("ca-1", "verify-ca"), ("ca-2", "require")] {
        let params = format!("sslmode={mode}&sslrootcert={ca}&application_name={app}");
        drop(runs_over_tls(&cluster, &url(&cluster, "127.0.0.1", &params), app, id).await);
    }
}

#[tokio::test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set (the test starts a PostgreSQL cluster of its own)"
)]
async fn a_certificate_from_another_ca_is_refused() {
    let Some((cluster, pki)) = tls_server("tls_wrong_ca", true) else {
        return;
    };
    let other = pki.other_ca.display();
    for mode in ["verify-full", "verify-ca", "require"] {
        let err = refused(&url(
            &cluster,
            "localhost",
            &format!("sslmode={mode}&sslrootcert={other}"),
        ))
        .await;
        assert!(err.contains("cannot connect"), "{mode}: {err}");
        assert!(err.contains("invalid peer certificate"), "{mode}: {err}");
        assert!(err.contains("UnknownIssuer"), "{mode}: {err}");
        assert!(
            err.contains(&format!(
                "(sslmode={mode}: the server's certificate is not signed by the CA \
                 certificates of `{other}`)"
            )),
            "{mode}: {err}"
        );
    }
}

#[tokio::test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set (the test starts a PostgreSQL cluster of its own)"
)]
async fn require_without_a_root_certificate_encrypts_and_takes_any_certificate() {
    let Some((cluster, _pki)) = tls_server("tls_require", true) else {
        return;
    };
    let app = "cp-tls-require";
    // 127.0.0.1 is not a name in the certificate, and no CA is given.
    let params = format!("sslmode=require&application_name={app}");
    drop(runs_over_tls(&cluster, &url(&cluster, "127.0.0.1", &params), app, "req-1").await);
}

#[tokio::test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set (the test starts a PostgreSQL cluster of its own)"
)]
async fn prefer_and_the_default_use_tls_and_disable_is_refused_by_a_tls_only_server() {
    let Some((cluster, _pki)) = tls_server("tls_prefer", true) else {
        return;
    };
    for (id, mode) in [("pref-1", "sslmode=prefer&"), ("pref-2", "")] {
        let app = format!("cp-tls-{id}");
        let params = format!("{mode}application_name={app}");
        drop(runs_over_tls(&cluster, &url(&cluster, "localhost", &params), &app, id).await);
    }
    let err = refused(&url(&cluster, "localhost", "sslmode=disable")).await;
    assert!(err.contains("pg_hba.conf rejects connection"), "{err}");
    assert!(err.contains("no encryption"), "{err}");
}

#[tokio::test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set (the test starts a PostgreSQL cluster of its own)"
)]
async fn prefer_falls_back_to_plain_on_a_server_without_tls() {
    if std::env::var_os(URL_VAR).is_none() {
        eprintln!("skipped: {URL_VAR} is not set");
        return;
    }
    let mut cluster = match Cluster::new() {
        Ok(c) => c,
        Err(why) => {
            eprintln!("skipped: cannot create a throw-away PostgreSQL cluster: {why}");
            return;
        }
    };
    cluster.start();
    let app = "cp-tls-plain";
    let rt = within(Runtime::open(&url(
        &cluster,
        "localhost",
        &format!("application_name={app}"),
    )))
    .await
    .unwrap();
    let h = rt
        .start(greet, "plain-1", "plain".to_owned())
        .await
        .unwrap();
    assert_eq!(
        within(h.result()).await.unwrap(),
        Ok("hello, plain".to_owned())
    );
    let (n, tls) = sessions(&cluster, app).await;
    assert!(n >= 1 && tls == 0, "{n} sessions, {tls} over TLS");
    let err = refused(&url(&cluster, "localhost", "sslmode=require")).await;
    assert!(err.contains("server does not support TLS"), "{err}");
}

#[tokio::test]
#[cfg_attr(
    not(checkpoint_test_postgres),
    ignore = "CHECKPOINT_TEST_POSTGRES_URL is not set (the test starts a PostgreSQL cluster of its own)"
)]
async fn prefer_falls_back_to_plain_when_the_tls_handshake_fails() {
    // The server speaks TLS 1.1 at most, which rustls does not: it says
    // yes to TLS, then the handshake fails.
    let conf = "ssl_min_protocol_version = 'TLSv1'\nssl_max_protocol_version = 'TLSv1.1'";
    let Some((cluster, _pki)) = tls_server_with("tls_fallback", false, conf) else {
        return;
    };
    let err = refused(&url(&cluster, "localhost", "sslmode=require")).await;
    assert!(err.contains("error performing TLS handshake"), "{err}");
    let app = "cp-tls-fallback";
    let rt = within(Runtime::open(&url(
        &cluster,
        "localhost",
        &format!("sslmode=prefer&application_name={app}"),
    )))
    .await
    .unwrap();
    let h = rt.start(greet, "fb-1", "fb".to_owned()).await.unwrap();
    assert_eq!(
        within(h.result()).await.unwrap(),
        Ok("hello, fb".to_owned())
    );
    let (n, tls) = sessions(&cluster, app).await;
    assert!(n >= 1 && tls == 0, "{n} sessions, {tls} over TLS");
}

/// No server needed: these are refused while the URL is read.
#[tokio::test]
async fn bad_tls_parameters_are_refused_before_connecting() {
    // Port 1: were a connection tried, the error would say it failed.
    let base = "postgres://postgres:hunter2@127.0.0.1:1/db";
    let err = refused(&format!("{base}?sslmode=bogus")).await;
    assert!(
        err.contains(
            "invalid sslmode `bogus`: expected disable, prefer, require, verify-ca or verify-full"
        ),
        "{err}"
    );
    assert!(
        !err.contains("hunter2") && !err.contains("cannot connect"),
        "{err}"
    );
    for mode in ["verify-full", "verify-ca", "require"] {
        let err = refused(&format!(
            "{base}?sslmode={mode}&sslrootcert=/nonexistent/ca.pem"
        ))
        .await;
        assert!(
            err.contains("invalid sslrootcert `/nonexistent/ca.pem`: cannot read it"),
            "{mode}: {err}"
        );
        assert!(!err.contains("cannot connect"), "{err}");
    }
}
