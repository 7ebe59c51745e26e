//! `serve`: the JSON API and the web page (`checkpoint_runtime::http`) on
//! the store, until interrupted.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use checkpoint_runtime::http::{self, ServeOptions, Token, TOKEN_ENV};
use serde_json::json;

use crate::commands::{self, CliError};

/// Serves store `url` on `listen` (HOST:PORT) until Ctrl-C or SIGTERM. The
/// address is checked before the store is opened: a non-loopback one needs
/// `allow_remote`.
pub async fn serve(
    url: &str,
    listen: &str,
    allow_remote: bool,
    json: bool,
) -> Result<ExitCode, CliError> {
    let addr = resolve(listen, allow_remote).await?;
    let (token, generated) = Token::from_env_or_generate()
        .map_err(|e| CliError::new("invalid_token", format!("cannot use the token: {e}")))?;
    let rt = commands::open(url).await?;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        CliError::new("cannot_listen", format!("cannot listen on {addr}: {e}"))
            .with("address", addr.to_string())
    })?;
    let bound = listener
        .local_addr()
        .map_err(|e| CliError::new("cannot_listen", format!("cannot listen on {addr}: {e}")))?;
    let page = format!("http://{bound}/");
    let store = checkpoint_runtime::store::redact_url(url);
    let banner = if json {
        json!({
            "listening": bound.to_string(),
            "url": page,
            "token": generated.then(|| token.as_str()),
            "token_source": if generated { "generated" } else { "env" },
        })
        .to_string()
            + "\n"
    } else if generated {
        // No login link with the token in it: the address would stay in
        // the browser's history.
        format!(
            "serving store `{store}` on {page}\n\
             token: {} (generated; set {TOKEN_ENV} to choose one)\n\
             open {page} and paste the token into its login form\n",
            token.as_str(),
        )
    } else {
        format!("serving store `{store}` on {page}\ntoken: from {TOKEN_ENV}\n")
    };
    {
        let mut out = std::io::stdout().lock();
        out.write_all(banner.as_bytes())
            .and_then(|()| out.flush())
            .map_err(|e| CliError::new("io", format!("cannot write the output: {e}")))?;
    }
    if !bound.ip().is_loopback() {
        eprintln!(
            "warning: listening on {bound}, beyond this machine: plain HTTP carries the token \
             in clear, so put TLS in front"
        );
    }
    log_requests_to_stderr();
    http::serve(
        listener,
        http::router(rt, token),
        ServeOptions::default(),
        interrupted(),
    )
    .await
    .map_err(|e| CliError::new("io", format!("the server stopped: {e}")))?;
    Ok(ExitCode::SUCCESS)
}

/// One line on stderr per request (`checkpoint::http` events) and the
/// runtime's warnings; `RUST_LOG`-style filters are not read: this is the
/// operator's log of the server, not a debugging aid.
fn log_requests_to_stderr() {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let filter = Targets::new()
        .with_target("checkpoint::http", LevelFilter::INFO)
        .with_default(LevelFilter::WARN);
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    // Already set (never in this binary): the existing one stays.
    let _ = tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .try_init();
}

/// The address `listen` names (the first that `HOST:PORT` resolves to):
/// loopback, or anything with `allow_remote`.
async fn resolve(listen: &str, allow_remote: bool) -> Result<SocketAddr, CliError> {
    let invalid = |why: String| {
        CliError::new(
            "invalid_listen",
            format!("cannot listen on `{listen}`: {why} (give HOST:PORT, such as 127.0.0.1:7070)"),
        )
        .with("listen", listen)
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(listen)
        .await
        .map_err(|e| invalid(e.to_string()))?
        .collect();
    let Some(first) = addrs.first().copied() else {
        return Err(invalid("it resolves to no address".to_owned()));
    };
    if !allow_remote {
        if let Some(remote) = addrs.iter().find(|a| !a.ip().is_loopback()) {
            return Err(CliError::new(
                "remote_listen_refused",
                format!(
                    "refusing to listen on {remote}: it is not a loopback address, so other \
                     machines could reach the API; pass --allow-remote to do it anyway (and put \
                     TLS in front: plain HTTP carries the token in clear)"
                ),
            )
            .with("listen", listen)
            .with("address", remote.to_string()));
        }
    }
    Ok(first)
}

/// Resolves on Ctrl-C or (on Unix) SIGTERM.
async fn interrupted() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = ctrl_c => {}
            () = term => {}
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn loopback_is_allowed_and_the_rest_needs_a_flag() {
        assert!(resolve("127.0.0.1:0", false).await.is_ok());
        assert!(resolve("[::1]:0", false).await.is_ok());
        let e = resolve("0.0.0.0:7070", false).await.unwrap_err();
        assert_eq!(e.kind, "remote_listen_refused");
        assert!(e.message.contains("--allow-remote"), "{}", e.message);
        assert!(resolve("0.0.0.0:0", true).await.is_ok());
        assert_eq!(
            resolve("127.0.0.1", false).await.unwrap_err().kind,
            "invalid_listen"
        );
    }
}
