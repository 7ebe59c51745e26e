//! A throw-away PostgreSQL cluster for a test (`restart.rs`, `pg_tls.rs`):
//! `initdb` into a temp dir, the server started on a free port of
//! 127.0.0.1, a guard that stops it and removes the directory when the
//! test ends (also when it fails), and a watchdog process that does the
//! same should the test process itself be killed. Optionally with TLS on
//! ([`Cluster::enable_tls`]).
//!
//! The cluster runs as the current user, or, when the test runs as root
//! (which `initdb` refuses), as the system user `postgres`. It needs the
//! PostgreSQL server binaries (`initdb`, `postgres`, `pg_isready`): from
//! `CHECKPOINT_TEST_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`,
//! else `pg_config --bindir`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A PostgreSQL cluster in a temp dir, its server on `port`. Dropping it
/// stops the server and removes the directory.
pub struct Cluster {
    bin: PathBuf,
    /// Holds `data/`, the server's socket and `server.log`; owned by the
    /// user the server runs as.
    base: PathBuf,
    pub port: u16,
    /// The user and group the server runs as, when not the current ones.
    owner: Option<(u32, u32)>,
    server: Option<Child>,
    watchdog: Option<Child>,
}

/// The directory of the server binaries (see the module docs).
pub fn server_bin() -> Result<PathBuf, String> {
    let has = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if let Some(dir) = std::env::var_os("CHECKPOINT_TEST_PG_BIN") {
        let dir = PathBuf::from(dir);
        return if has(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "CHECKPOINT_TEST_PG_BIN={} has no initdb and postgres",
                dir.display()
            ))
        };
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let dir = e.path().join("bin");
            has(&dir).then_some((version, dir))
        })
        .collect();
    found.sort();
    if let Some((_, dir)) = found.pop() {
        return Ok(dir);
    }
    let out = Command::new("pg_config").arg("--bindir").output();
    if let Ok(out) = out {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if out.status.success() && has(&dir) {
            return Ok(dir);
        }
    }
    Err(
        "no PostgreSQL server binaries (initdb, postgres) found in CHECKPOINT_TEST_PG_BIN, \
         /usr/lib/postgresql/*/bin or pg_config --bindir"
            .to_owned(),
    )
}

/// `None` when the server can run as the current user; as root (which
/// `initdb` refuses) the uid and gid of the system user `postgres`.
fn server_owner() -> Result<Option<(u32, u32)>, String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| format!("running `id -u`: {e}"))?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"postgres") && f.len() > 3)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
                .flatten()
        })
        .map(Some)
        .ok_or_else(|| {
            "the test runs as root, which initdb refuses, and there is no `postgres` user to \
             run the server as"
                .to_owned()
        })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn kill(sig: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

impl Cluster {
    /// Creates the cluster (`initdb`) and starts the watchdog; the server
    /// is not started yet.
    pub fn new() -> Result<Cluster, String> {
        let bin = server_bin()?;
        let owner = server_owner()?;
        let base = std::env::temp_dir().join(format!(
            "checkpoint-pg-{}-{}",
            std::process::id(),
            super::now_nanos() % 1_000_000_000
        ));
        std::fs::create_dir_all(&base).map_err(|e| format!("creating {}: {e}", base.display()))?;
        let mut cluster = Cluster {
            bin,
            base,
            port: free_port(),
            owner,
            server: None,
            watchdog: None,
        };
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&cluster.base, Some(uid), Some(gid)).map_err(|e| {
                format!(
                    "handing {} to the server's user: {e}",
                    cluster.base.display()
                )
            })?;
        }
        // Should this process be killed, stop the server and the processes
        // listed in `watched.pids` (the workers), and clean up.
        let script = format!(
            "while kill -0 {} 2>/dev/null; do sleep 1; done; cd '{}' || exit; \
             for p in $(cat watched.pids 2>/dev/null); do kill -KILL \"$p\"; done; \
             pid=$(head -n 1 data/postmaster.pid 2>/dev/null) && kill -QUIT \"$pid\"; \
             sleep 2; cd / && rm -rf '{}'",
            std::process::id(),
            cluster.base.display(),
            cluster.base.display()
        );
        cluster.watchdog = Some(
            Command::new("sh")
                .args(["-c", &script])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting the watchdog: {e}"))?,
        );
        let out = cluster
            .command("initdb")
            .args(["-D", "data", "-U", "postgres", "-A", "trust", "-E", "UTF8"])
            .args(["--locale=C", "--no-sync"])
            .output()
            .map_err(|e| format!("running initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(cluster)
    }

    /// Has the watchdog SIGKILL process `pid` too, should this process be
    /// killed.
    pub fn watch(&self, pid: u32) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.base.join("watched.pids"))
            .expect("the watchdog's list");
        writeln!(f, "{pid}").expect("writing the watchdog's list");
    }

    /// A server binary, run as the server's user in its directory.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new(self.bin.join(program));
        c.current_dir(&self.base)
            .env("LC_ALL", "C")
            .stdin(Stdio::null());
        if let Some((uid, gid)) = self.owner {
            use std::os::unix::process::CommandExt;
            c.uid(uid).gid(gid);
        }
        c
    }

    /// Where the server's Unix socket is (`-k .` is taken from the data
    /// directory, where the server runs): `host=DIR port=PORT` reaches it
    /// without TCP.
    pub fn socket_dir(&self) -> PathBuf {
        self.base.join("data")
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.base.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start(&mut self) {
        assert!(self.server.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.base.join("server.log"))
            .expect("the server log");
        let port = self.port.to_string();
        let server = self
            .command("postgres")
            .args(["-D", "data", "-p", &port, "-k", "."])
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=100",
            ])
            .stdout(log.try_clone().expect("the server log"))
            .stderr(log)
            .spawn()
            .expect("starting postgres");
        self.server = Some(server);
        let since = Instant::now();
        loop {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args([
                    "-q",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port,
                    "-U",
                    "postgres",
                    "-t",
                    "1",
                ])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            if let Some(status) = self
                .server
                .as_mut()
                .and_then(|s| s.try_wait().ok().flatten())
            {
                self.server = None;
                panic!("postgres exited with {status}: {}", self.log_tail());
            }
            assert!(
                since.elapsed() < Duration::from_secs(60),
                "postgres did not accept connections within 60 s: {}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `sig` to the server and waits until it has exited.
    pub fn stop(&mut self, sig: &str) {
        let Some(mut server) = self.server.take() else {
            return;
        };
        kill(sig, server.id());
        let since = Instant::now();
        while server.try_wait().ok().flatten().is_none() {
            if since.elapsed() > Duration::from_secs(60) {
                let _ = server.kill();
                let _ = server.wait();
                panic!(
                    "postgres did not stop on {sig} within 60 s: {}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            kill("-QUIT", server.id());
            let since = Instant::now();
            while server.try_wait().ok().flatten().is_none()
                && since.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = server.kill();
            let _ = server.wait();
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        if std::thread::panicking() {
            eprintln!("server log (tail):\n{}", self.log_tail());
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// A server certificate for [`Cluster::enable_tls`], in PEM.
pub struct ServerTls<'a> {
    /// The certificate (with any intermediates after it).
    pub cert_pem: &'a str,
    /// Its private key.
    pub key_pem: &'a str,
    /// Refuse connections over TCP without TLS (`hostnossl ... reject`).
    pub tls_only: bool,
    /// More lines for `postgresql.conf` (say, `ssl_max_protocol_version`).
    pub extra_conf: &'a str,
}

impl Cluster {
    /// Turns TLS on, before [`start`](Cluster::start): writes
    /// `server.crt` and `server.key` (mode 0600, owned by the server's
    /// user, as the server demands) into the data directory, sets
    /// `ssl = on`, and replaces `pg_hba.conf` with trust for local sockets
    /// and for TCP from the loopback, over TLS (`hostssl`) and, unless
    /// `tls_only`, without it.
    pub fn enable_tls(&self, tls: &ServerTls<'_>) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        let data = self.base.join("data");
        let write = |name: &str, text: &str, mode: u32| -> Result<(), String> {
            let path = data.join(name);
            std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(|e| format!("setting the mode of {}: {e}", path.display()))?;
            if let Some((uid, gid)) = self.owner {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                    .map_err(|e| format!("handing {} to the server's user: {e}", path.display()))?;
            }
            Ok(())
        };
        write("server.crt", tls.cert_pem, 0o644)?;
        write("server.key", tls.key_pem, 0o600)?;
        let mut hba = String::from("local all all trust\n");
        if tls.tls_only {
            hba.push_str(
                "hostnossl all all 127.0.0.1/32 reject\nhostnossl all all ::1/128 reject\n",
            );
        }
        hba.push_str("hostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n");
        if !tls.tls_only {
            hba.push_str("host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n");
        }
        write("pg_hba.conf", &hba, 0o600)?;
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf)
            .map_err(|e| format!("reading {}: {e}", conf.display()))?;
        text.push_str("\n# Cluster::enable_tls\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        text.push_str(tls.extra_conf);
        text.push('\n');
        write("postgresql.conf", &text, 0o600)
    }
}
