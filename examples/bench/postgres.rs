//! The PostgreSQL rows of the bench table (`examples/bench.rs`), when a
//! server is given: `--postgres URL` or `CHECKPOINT_TEST_POSTGRES_URL`.
//! Each measurement works in PostgreSQL schemas of its own (`cp_bench_*`),
//! dropped at the end.
//!
//! - **Latency**: one run at a time, as a user starts it and awaits its
//!   result (`rt.start(..)`, `h.result()`), taking `durable_loop`
//!   checkpoints one after the other; the time between two checkpoints
//!   returning. It alternates with the raw floor in rounds (24 of 100
//!   each) on the same server; the row gives the ratio of the two pooled
//!   medians, and the median and quartiles of each round's own ratio (the
//!   two sides measured a moment apart). The raw floor is a
//!   tokio-postgres `INSERT` of the same bytes committed on its own (one
//!   prepared statement in autocommit: one round trip and one WAL flush,
//!   the fastest durable insert there is; an explicit `BEGIN` / `INSERT` /
//!   `COMMIT` is shown next to it). The row also shows what the difference
//!   is made of: a round trip (`SELECT 1`), the server's CPU per checkpoint
//!   (its sessions' processes, from `/proc`) and the WAL written (the whole
//!   server's, so other clients count too).
//! - **Throughput**: 1,000 runs of `durable_loop` on two worker processes
//!   (this binary run with `--pg-worker`): one starts the runs and awaits
//!   their results in order, as the README shows it (and works on runs
//!   too, as every runtime does); the other only works (`run_worker`). The
//!   figure is checkpoints per second from the first start to the last
//!   result, with the two processes' CPU per checkpoint beside it. The raw floor: the same number of rows of the same bytes in
//!   multi-row `INSERT ... SELECT unnest($1::bytea[])` statements of 1,000
//!   rows, one transaction each, on one connection, measured right before
//!   and right after each round of runs (their mean is the round's floor:
//!   on this project's VM the floor moves by a third between minutes).
//!   `BENCH_ROUNDS` rounds (default 3; the median is shown).
//! - Both also measure a **fenced floor** beside the raw one, in the same
//!   rounds ([`fenced_tables`]): the least a store writes that fences each
//!   checkpoint on its run's row and keeps the run's latest seq there (the
//!   run's row updated on its epoch and latest seq, the checkpoint's row
//!   inserted under a key of run and seq, in one statement), lone and
//!   1,000 runs at a time. It tells what the fence costs from what the rest
//!   of the store costs.
//!
//! - **Crowded**: the throughput case again, in a store that also holds
//!   `BENCH_PG_WAITING` runs (default 20,000) waiting for a signal that
//!   does not come (approvals waiting for a person), brought to their wait
//!   before each round as a user would (`rt.start`, `run_until_idle`), the
//!   tables then vacuumed as they would be after days of waiting;
//!   against the same case in an empty store, in alternating rounds. A
//!   claim reads only the runs that can be due, so the waiting runs should
//!   cost next to nothing (target: at least 0.8 of the empty store's rate).
//!
//! Both sides of each comparison connect the same way: without TLS (see
//! [`same_transport`]).
//!
//! `BENCH_PG_RUNS` / `BENCH_PG_CHECKPOINTS` change the throughput case's
//! size (default 1,000 runs x 20 checkpoints, times `BENCH_SCALE`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use checkpoint_runtime::prelude::*;
use checkpoint_runtime::store::postgres::PostgresStore;
use tokio_postgres::{Client, NoTls};

use super::stats::{median_of, met, pct, scaled, us};
use super::workloads::{durable_loop, Probe};
use super::BoxError;

/// The server to measure on: `--postgres URL` or `CHECKPOINT_TEST_POSTGRES_URL`.
pub(crate) fn url(args: &[String]) -> Option<String> {
    args.iter()
        .position(|a| a == "--postgres")
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| std::env::var("CHECKPOINT_TEST_POSTGRES_URL").ok())
}

/// A fresh PostgreSQL schema name.
pub(crate) fn schema_name(what: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "cp_bench_{what}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// `url` with `key=value` added to its query.
fn with_param(url: &str, key: &str, value: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{key}={value}")
}

/// `url` as both sides of every comparison use it: the floors' client has
/// no TLS, so the store gets `sslmode=disable` too, unless the URL names
/// an `sslmode` (the store's default, `prefer`, would encrypt when the
/// server offers TLS, and the comparison would time TLS on one side only:
/// on this project's test machine, about 0.3x of the latency ratio).
pub(crate) fn same_transport(url: &str) -> String {
    if url.contains("sslmode=") {
        url.to_owned()
    } else {
        with_param(url, "sslmode", "disable")
    }
}

/// A plain client (its connection runs in a task).
pub(crate) async fn connect(url: &str) -> Result<Client, BoxError> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// A table of blobs for the raw floors, in a schema of its own.
async fn raw_table(client: &Client, schema: &str) -> Result<(), BoxError> {
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; \
             CREATE TABLE {schema}.t (id bigserial PRIMARY KEY, data bytea NOT NULL)"
        ))
        .await?;
    Ok(())
}

/// The tables of the fenced floors, in `schema` (made by [`raw_table`]): a
/// run's row (`runs`: its lease epoch and latest seq) and its checkpoints'
/// (`cps`, keyed by run and seq), the least a store writes that fences
/// each checkpoint on its run's row and keeps the run's latest seq there.
async fn fenced_tables(client: &Client, schema: &str, runs: usize) -> Result<(), BoxError> {
    client
        .batch_execute(&format!(
            "CREATE TABLE {schema}.runs (id text PRIMARY KEY, epoch bigint NOT NULL, \
               latest_seq bigint NOT NULL) WITH (fillfactor = 50); \
             CREATE TABLE {schema}.cps (run text NOT NULL, seq bigint NOT NULL, \
               data bytea NOT NULL, PRIMARY KEY (run, seq)); \
             INSERT INTO {schema}.runs SELECT 'f' || g, 1, 0 FROM generate_series(0, {}) g",
            runs.max(1) - 1
        ))
        .await?;
    Ok(())
}

/// The fenced write of one checkpoint (see [`fenced_tables`]): `$1` run,
/// `$2` seq, `$3` epoch, `$4` bytes; one row when it wrote.
fn fenced_insert(schema: &str) -> String {
    format!(
        "WITH r AS (UPDATE {schema}.runs SET latest_seq = $2::bigint \
           WHERE id = $1 AND epoch = $3::bigint AND latest_seq = $2::bigint - 1 RETURNING id) \
         INSERT INTO {schema}.cps (run, seq, data) SELECT id, $2::bigint, $4 FROM r"
    )
}

/// Rows per second of [`fenced_insert`] for `runs` runs (made by
/// [`fenced_tables`]) at a time, `rows` in all: one statement and
/// transaction per checkpoint of every run (`INSERT ... SELECT` from the
/// runs' `UPDATE`, from `unnest`ed columns), on one connection.
async fn fenced_batched(
    client: &Client,
    schema: &str,
    bytes: &[u8],
    rows: usize,
    runs: usize,
) -> Result<f64, BoxError> {
    let insert = client
        .prepare(&format!(
            "WITH r AS (UPDATE {schema}.runs SET latest_seq = u.seq \
               FROM unnest($1::text[], $2::bigint[]) AS u (id, seq) \
               WHERE runs.id = u.id AND runs.epoch = 1 AND runs.latest_seq = u.seq - 1 \
               RETURNING u.id, u.seq) \
             INSERT INTO {schema}.cps (run, seq, data) SELECT r.id, r.seq, d.data \
               FROM r JOIN unnest($1::text[], $3::bytea[]) AS d (id, data) ON d.id = r.id"
        ))
        .await?;
    let ids: Vec<String> = (0..runs).map(|r| format!("f{r}")).collect();
    let start = Instant::now();
    let (mut left, mut seq) = (rows, 0i64);
    while left > 0 {
        let k = left.min(runs);
        seq += 1;
        let seqs = vec![seq; k];
        let data = vec![bytes; k];
        let n = client.execute(&insert, &[&&ids[..k], &seqs, &data]).await?;
        if n != k as u64 {
            return Err(format!("fenced floor: {n} of {k} rows written").into());
        }
        left -= k;
    }
    Ok(rows as f64 / start.elapsed().as_secs_f64())
}

/// CPU time (user + system, clock ticks) of the server processes serving
/// sessions of `app`, by process id.
async fn server_ticks(client: &Client, app: &str) -> Vec<(i32, u64)> {
    let pids: Vec<i32> = client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .map(|rows| rows.iter().map(|r| r.get(0)).collect())
        .unwrap_or_default();
    pids.into_iter()
        .map(|pid| (pid, proc_ticks(&format!("/proc/{pid}/stat"))))
        .collect()
}

/// utime + stime of a `/proc/.../stat` file (0 when unreadable).
fn proc_ticks(path: &str) -> u64 {
    let Ok(stat) = std::fs::read_to_string(path) else {
        return 0;
    };
    let Some(close) = stat.rfind(')') else {
        return 0;
    };
    let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let tick = |i: usize| rest.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    tick(11) + tick(12)
}

/// Server CPU microseconds between two [`server_ticks`] samples (of the
/// processes alive at both).
fn server_us(before: &[(i32, u64)], after: &[(i32, u64)]) -> f64 {
    after
        .iter()
        .filter_map(|(pid, now)| {
            let was = before.iter().find(|b| b.0 == *pid)?.1;
            Some(now.saturating_sub(was) as f64 * 1e4)
        })
        .sum()
}

/// CPU microseconds of this process so far.
fn own_us() -> f64 {
    proc_ticks("/proc/self/stat") as f64 * 1e4
}

/// The server's WAL position, in bytes.
async fn wal_lsn(client: &Client) -> Result<i64, BoxError> {
    Ok(client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0')::bigint", &[])
        .await?
        .get(0))
}

/// The PostgreSQL rows (see the module docs).
pub(crate) async fn rows(url: &str, scale: f64, payload: usize) -> Result<Vec<String>, BoxError> {
    let url = &same_transport(url);
    let mut rows = Vec::new();
    let only = std::env::var("BENCH_PG").unwrap_or_default();
    let want = |s: &str| only.is_empty() || only.split(',').any(|o| o.trim() == s);
    if want("latency") {
        rows.push(latency_row(url, scale, payload).await?);
    }
    if want("throughput") {
        rows.push(throughput_row(url, scale, payload).await?);
    }
    if want("history") {
        rows.push(history_row(url, scale).await?);
    }
    if want("crowded") {
        rows.push(crowded_row(url, scale).await?);
    }
    Ok(rows)
}

/// The growing-history agent of `history.rs` on PostgreSQL: 4,000 turns
/// (times `BENCH_SCALE`) of one ~500-byte message appended, every version
/// kept, one run started and awaited as a user does. Shows the bytes the
/// rows and segments hold and the tables' size on disk (with their TOAST
/// and indexes) against the final state (target: at most 3x); the bytes
/// of fields the store wrote per checkpoint (`bytes_written`: rows and
/// segments, folds included) against the appended bytes (target: at most
/// 2x plus a fixed part; the WAL the server wrote is shown beside); and
/// the checkpoint latency over the last twentieth against the raw commit
/// floor (a tokio-postgres `INSERT` of one message's bytes in autocommit,
/// measured right after) plus 1.5 times encoding the final state once.
async fn history_row(url: &str, scale: f64) -> Result<String, BoxError> {
    use super::history::{agent, message, timed, Message, CONTENT};
    use checkpoint_runtime::store::Store;
    use std::sync::Arc;
    let n = scaled(4000, scale) as u32;
    eprintln!("postgres history: one agent of {n} turns ...");
    let schema = schema_name("history");
    let store_url = with_param(url, "schema", &schema);
    let store = Arc::new(PostgresStore::open(&store_url).await?);
    let probe = Probe::default();
    let rt = Runtime::builder()
        .resource(probe.clone())
        .store(store.clone())
        .in_memory();
    rt.register(agent);
    let watch = connect(url).await?;
    let wal = wal_lsn(&watch).await?;
    let wrote = store.bytes_written();
    rt.start(agent, "history", (n, CONTENT))
        .await?
        .result()
        .await?;
    let per = |v: f64| v / f64::from(n.max(1));
    let wal = per((wal_lsn(&watch).await? - wal) as f64);
    let written = per((store.bytes_written() - wrote) as f64);
    let marks = probe.take();
    let gaps: Vec<Duration> = marks.windows(2).map(|w| w[1] - w[0]).collect();
    let mut tail = gaps[gaps.len() - gaps.len() / 20..].to_vec();
    let tail = median_of(&mut tail);
    drop(rt);
    let state = store
        .latest_checkpoint("history")
        .await?
        .map(|c| c.data.len())
        .unwrap_or(0)
        .max(1);
    drop(store);
    // The floor: one message's bytes committed on their own.
    let raw_schema = schema_name("history_raw");
    raw_table(&watch, &raw_schema).await?;
    let insert = watch
        .prepare(&format!("INSERT INTO {raw_schema}.t (data) VALUES ($1)"))
        .await?;
    let appended = checkpoint_runtime::__private::encode(&message(n / 2))?
        .bytes()
        .len();
    let bytes: Vec<u8> = (0..appended).map(|i| i as u8).collect();
    let mut raw = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        watch.execute(&insert, &[&bytes]).await?;
        raw.push(t.elapsed());
    }
    let floor = median_of(&mut raw);
    watch
        .batch_execute(&format!("DROP SCHEMA {raw_schema} CASCADE"))
        .await?;
    let history: Vec<Message> = (0..n).map(message).collect();
    let final_state = (history, n);
    let encode = timed(15, || {
        checkpoint_runtime::__private::encode(&final_state).map(|e| e.bytes().len())
    });
    let budget = floor + encode.mul_f64(1.5);
    let q = |sql: String| {
        let watch = &watch;
        async move { Ok::<i64, BoxError>(watch.query_one(&sql, &[]).await?.get(0)) }
    };
    let rows = q(format!(
        "SELECT ((SELECT coalesce(sum(length(data)), 0) FROM {schema}.cp_checkpoints) \
         + (SELECT coalesce(sum(length(bytes)), 0) FROM {schema}.cp_segments))::bigint"
    ))
    .await?;
    let disk = q(format!(
        "SELECT (pg_total_relation_size('{schema}.cp_checkpoints') \
         + pg_total_relation_size('{schema}.cp_segments'))::bigint"
    ))
    .await?;
    PostgresStore::drop_schema(url, &schema).await?;
    let (rows_x, disk_x) = (rows as f64 / state as f64, disk as f64 / state as f64);
    let written_x = written / appended as f64;
    let lat_x = us(tail) / us(budget);
    Ok(format!(
        "| PostgreSQL growing history, {n} x {appended} B, every version kept | store: rows \
         and segments hold {rows_x:.2}x the final state ({:.2} MiB), the tables on disk \
         {disk_x:.2}x {}; written per checkpoint: {written:.0} B of fields = {written_x:.2}x \
         the appended bytes {} (WAL {:.1}x); latency at the end {:.0} us against raw INSERT \
         {:.0} us + 1.5 x encoding ({:.0} us) = {:.0} us: {lat_x:.2}x {} | final state \
         {:.2} MiB | store <= 3x, written <= 2x + fixed, latency <= 1x |",
        rows as f64 / 1048576.0,
        met(disk_x <= 3.0),
        met(written_x <= 2.0),
        wal / appended as f64,
        us(tail),
        us(floor),
        us(encode),
        us(budget),
        met(lat_x <= 1.0),
        state as f64 / 1048576.0,
    ))
}

async fn latency_row(url: &str, scale: f64, payload: usize) -> Result<String, BoxError> {
    // Short rounds, many of them: this VM's disk flush time drifts by a
    // third over seconds, and rounds of 300 checkpoints put the drift
    // between the two sides (the ratio moved between 1.29x and 1.55x from
    // run to run).
    let (rounds, per_round) = (24usize, scaled(100, scale) as u32);
    eprintln!(
        "postgres latency: {rounds} rounds of {per_round} checkpoints and {per_round} raw commits ..."
    );
    let app = format!("cp-bench-{}", std::process::id());
    let schema = schema_name("seq");
    let store_url = with_param(
        &with_param(url, "schema", &schema),
        "application_name",
        &app,
    );
    let probe = Probe::default();
    let rt = Runtime::builder()
        .resource(probe.clone())
        .open(&store_url)
        .await?;
    rt.register(durable_loop);
    let raw_app = format!("cp-bench-raw-{}", std::process::id());
    let raw = connect(&with_param(url, "application_name", &raw_app)).await?;
    let raw_schema = schema_name("raw");
    raw_table(&raw, &raw_schema).await?;
    let insert = raw
        .prepare(&format!("INSERT INTO {raw_schema}.t (data) VALUES ($1)"))
        .await?;
    let ping = raw.prepare("SELECT 1").await?;
    fenced_tables(&raw, &raw_schema, 1).await?;
    let fenced_write = raw.prepare(&fenced_insert(&raw_schema)).await?;
    let mut fenced_seq = 0i64;
    let bytes: Vec<u8> = (0..payload).map(|i| i as u8).collect();
    let watch = connect(url).await?;

    let (mut ours, mut auto, mut tx, mut rtt) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut fenced = Vec::new();
    let mut paired: Vec<f64> = Vec::new();
    // Per checkpoint / raw commit: client CPU, server CPU, WAL bytes.
    let (mut our_cost, mut raw_cost) = ([0f64; 3], [0f64; 3]);
    for round in 0..rounds {
        // Ours: a run as a user starts it and awaits its result.
        let (srv, cpu, wal) = (
            server_ticks(&watch, &app).await,
            own_us(),
            wal_lsn(&watch).await?,
        );
        let h = rt
            .start(durable_loop, &format!("seq-{round}"), (per_round, 1000))
            .await?;
        h.result().await?;
        let marks = probe.take();
        let mut round_ours: Vec<Duration> = marks.windows(2).map(|w| w[1] - w[0]).collect();
        ours.extend(&round_ours);
        let n = f64::from(per_round);
        our_cost[0] += (own_us() - cpu) / n;
        our_cost[1] += server_us(&srv, &server_ticks(&watch, &app).await) / n;
        our_cost[2] += (wal_lsn(&watch).await? - wal) as f64 / n;

        // The raw floor: one INSERT committed on its own.
        let (srv, cpu, wal) = (
            server_ticks(&watch, &raw_app).await,
            own_us(),
            wal_lsn(&watch).await?,
        );
        let mut round_raw = Vec::with_capacity(per_round as usize);
        for _ in 0..per_round {
            let t = Instant::now();
            raw.execute(&insert, &[&bytes]).await?;
            round_raw.push(t.elapsed());
        }
        auto.extend(&round_raw);
        // The disk's flush time drifts over seconds: each round's own
        // ratio too, the two sides measured a moment apart.
        paired.push(
            median_of(&mut round_ours).as_secs_f64()
                / median_of(&mut round_raw).as_secs_f64().max(1e-12),
        );
        raw_cost[0] += (own_us() - cpu) / n;
        raw_cost[1] += server_us(&srv, &server_ticks(&watch, &raw_app).await) / n;
        raw_cost[2] += (wal_lsn(&watch).await? - wal) as f64 / n;
        // The fenced floor: the run's row updated, fenced on its epoch and
        // latest seq, and the checkpoint's row inserted, in one statement.
        for _ in 0..per_round {
            fenced_seq += 1;
            let t = Instant::now();
            let n = raw
                .execute(&fenced_write, &[&"f0", &fenced_seq, &1i64, &bytes])
                .await?;
            fenced.push(t.elapsed());
            if n != 1 {
                return Err("the fenced floor's write was refused".into());
            }
        }
        // The same in an explicit transaction, and round trips.
        for _ in 0..per_round / 4 {
            let t = Instant::now();
            raw.batch_execute("BEGIN").await?;
            raw.execute(&insert, &[&bytes]).await?;
            raw.batch_execute("COMMIT").await?;
            tx.push(t.elapsed());
            let t = Instant::now();
            raw.query_one(&ping, &[]).await?;
            rtt.push(t.elapsed());
        }
    }
    drop(rt);
    let r = rounds as f64;
    let (our_cost, raw_cost) = (our_cost.map(|c| c / r), raw_cost.map(|c| c / r));
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / (v.len().max(1) as u32);
    let (ours_mean, auto_mean) = (mean(&ours), mean(&auto));
    let (ours_med, ours_p99) = (median_of(&mut ours), pct(&mut ours, 0.99));
    let (auto_med, auto_p99) = (median_of(&mut auto), pct(&mut auto, 0.99));
    let (tx_med, rtt_med) = (median_of(&mut tx), median_of(&mut rtt));
    let fenced_med = median_of(&mut fenced);
    let ratio = ours_med.as_secs_f64() / auto_med.as_secs_f64().max(1e-12);
    let of_fenced = ours_med.as_secs_f64() / fenced_med.as_secs_f64().max(1e-12);
    let fenced_ratio = fenced_med.as_secs_f64() / auto_med.as_secs_f64().max(1e-12);
    let mean_ratio = ours_mean.as_secs_f64() / auto_mean.as_secs_f64().max(1e-12);
    paired.sort_by(f64::total_cmp);
    let paired_text = format!(
        "median {:.2}x, quartiles {:.2}x-{:.2}x",
        paired[paired.len() / 2],
        paired[paired.len() / 4],
        paired[paired.len() * 3 / 4]
    );
    raw.batch_execute(&format!("DROP SCHEMA {raw_schema} CASCADE"))
        .await?;
    PostgresStore::drop_schema(url, &schema).await?;
    Ok(format!(
        "| PostgreSQL durable checkpoint, {payload} B state, one run at a time ({rounds} runs x {per_round} checkpoints, started and awaited as a user does, alternating with the raw rounds) | median {:.0} us, mean {:.0} us, p99 {:.0} us (per checkpoint: client CPU {:.0} us, server CPU {:.0} us, WAL {:.1} KB; one statement in 1 round trip, autocommit: WITH fenced UPDATE run, INSERT checkpoint holding its history event) | raw tokio-postgres INSERT of {payload} B, autocommit ({rounds} x {per_round}): median {:.0} us, mean {:.0} us, p99 {:.0} us (client CPU {:.0} us, server CPU {:.0} us, WAL {:.1} KB); BEGIN + INSERT + COMMIT: median {:.0} us; a round trip (SELECT 1): median {:.0} us; fenced floor (one statement: UPDATE of a 3-column run row fenced on epoch and latest seq, INSERT of the bytes keyed by run and seq): median {:.0} us = {fenced_ratio:.2}x raw, ours = {of_fenced:.2}x it | {ratio:.2}x (means {mean_ratio:.2}x; round by round: {paired_text}) | <= 1.3x | {} |",
        us(ours_med),
        us(ours_mean),
        us(ours_p99),
        our_cost[0],
        our_cost[1],
        our_cost[2] / 1e3,
        us(auto_med),
        us(auto_mean),
        us(auto_p99),
        raw_cost[0],
        raw_cost[1],
        raw_cost[2] / 1e3,
        us(tx_med),
        us(rtt_med),
        us(fenced_med),
        met(ratio <= 1.3),
    ))
}

/// A worker process of the throughput case (see [`worker`]).
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts this binary as `--pg-worker ROLE URL RUNS N PREFIX`; waits for its
/// `READY`. Returns it with its stdout lines.
fn spawn_worker(
    role: &str,
    url: &str,
    runs: usize,
    n: u32,
    prefix: &str,
) -> Result<(Proc, std::io::Lines<BufReader<std::process::ChildStdout>>), BoxError> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args([
            "--pg-worker",
            role,
            url,
            &runs.to_string(),
            &n.to_string(),
            prefix,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let proc = Proc(child);
    match lines.next() {
        Some(Ok(l)) if l == "READY" => Ok((proc, lines)),
        other => Err(format!("worker {role}: expected READY, got {other:?}").into()),
    }
}

/// `--pg-worker ROLE URL RUNS N PREFIX`: a worker process of the throughput
/// case. `work` works until killed; `app` waits for a line on stdin, then
/// starts runs `PREFIX-0` .. `PREFIX-{RUNS-1}` of `N` checkpoints, awaits
/// their results in order, and prints `DONE <seconds>` and works on.
pub(crate) async fn worker(args: &[String]) -> Result<(), BoxError> {
    let [role, url, runs, n, prefix] = args else {
        return Err("usage: --pg-worker ROLE URL RUNS N PREFIX".into());
    };
    let (runs, n): (usize, u32) = (runs.parse()?, n.parse()?);
    let rt = Runtime::builder()
        .worker_id(&format!("bench-{role}"))
        .open(url)
        .await?;
    rt.register(durable_loop);
    println!("READY");
    std::io::stdout().flush()?;
    if role == "app" {
        let mut go = String::new();
        std::io::stdin().read_line(&mut go)?;
        let start = Instant::now();
        let mut starts = tokio::task::JoinSet::new();
        for r in 0..runs {
            let rt = rt.clone();
            let id = format!("{prefix}-{r}");
            starts.spawn(async move { rt.start(durable_loop, &id, (n, 1000)).await });
        }
        let mut handles = Vec::with_capacity(runs);
        while let Some(h) = starts.join_next().await {
            handles.push(h??);
        }
        let want: u64 = (0..n)
            .map(|i| u64::from(((i % 1000) as u8).wrapping_add(1)))
            .sum();
        for h in &handles {
            let got = h.result().await?;
            if got != want {
                return Err(format!("run {}: result {got}, expected {want}", h.id()).into());
            }
        }
        println!("DONE {}", start.elapsed().as_secs_f64());
        std::io::stdout().flush()?;
    }
    rt.run_worker().await?;
    Ok(())
}

/// Rows per second of `rows` rows of `bytes` inserted `per_tx` at a time
/// (`INSERT ... SELECT unnest(..)`, one transaction each) on one connection.
async fn raw_batched(
    client: &Client,
    schema: &str,
    bytes: &[u8],
    rows: usize,
    per_tx: usize,
) -> Result<f64, BoxError> {
    let insert = client
        .prepare(&format!(
            "INSERT INTO {schema}.t (data) SELECT unnest($1::bytea[])"
        ))
        .await?;
    let batch: Vec<&[u8]> = vec![bytes; per_tx];
    let start = Instant::now();
    let mut left = rows;
    while left > 0 {
        let k = left.min(per_tx);
        client.batch_execute("BEGIN").await?;
        client.execute(&insert, &[&&batch[..k]]).await?;
        client.batch_execute("COMMIT").await?;
        left -= k;
    }
    Ok(rows as f64 / start.elapsed().as_secs_f64())
}

/// Waits for a signal that the crowded case never sends.
#[workflow]
async fn approval(ctx: &Ctx, n: u32) -> u32 {
    let go: u32 = ctx.wait_for("go").await;
    n + go
}

/// Starts `n` runs of [`approval`] in the store at `url` and works until
/// each waits for its signal.
async fn waiting_runs(url: &str, n: usize) -> Result<(), BoxError> {
    let rt = Runtime::builder()
        .worker_id("bench-crowd")
        .open(url)
        .await?;
    rt.register(approval);
    let mut starts = tokio::task::JoinSet::new();
    for r in 0..n {
        let rt = rt.clone();
        starts.spawn(async move { rt.start(approval, &format!("wait-{r}"), 0).await });
    }
    while let Some(h) = starts.join_next().await {
        h??;
    }
    rt.run_until_idle().await?;
    let waiting = rt
        .runs(RunFilter {
            status: Some(StatusKind::Waiting),
            ..RunFilter::default()
        })
        .await?
        .len();
    if waiting != n {
        return Err(format!("{waiting} of {n} runs wait for their signal").into());
    }
    Ok(())
}

/// One round of ours: two worker processes, `runs` runs of `n`
/// checkpoints, in a store that holds `waiting` runs waiting for a signal
/// besides; checkpoints per second from the first start to the last
/// result, and the two processes' CPU microseconds per checkpoint (over
/// their whole lives: opening the store and starting and ending the runs
/// included).
async fn two_workers(
    url: &str,
    runs: usize,
    n: u32,
    waiting: usize,
) -> Result<(f64, f64), BoxError> {
    let schema = schema_name("tp");
    let store_url = with_param(url, "schema", &schema);
    // Creates the tables before either worker starts.
    drop(PostgresStore::open(&store_url).await?);
    if waiting > 0 {
        waiting_runs(&store_url, waiting).await?;
        // As in a store where runs have waited for days: vacuumed and
        // analysed since they were written.
        let client = connect(url).await?;
        for table in ["cp_runs", "cp_checkpoints", "cp_history", "cp_signals"] {
            client
                .batch_execute(&format!("VACUUM (ANALYZE) {schema}.{table}"))
                .await?;
        }
    }
    let (work, _) = spawn_worker("work", &store_url, runs, n, "tp")?;
    let (mut app, mut lines) = spawn_worker("app", &store_url, runs, n, "tp")?;
    writeln!(app.0.stdin.as_mut().ok_or("no stdin")?, "go")?;
    let done = tokio::task::spawn_blocking(move || lines.next())
        .await?
        .ok_or("the app worker ended early")??;
    let secs: f64 = done
        .strip_prefix("DONE ")
        .ok_or_else(|| format!("app worker: {done}"))?
        .parse()?;
    let checkpoints = runs as f64 * f64::from(n);
    let ticks: u64 = [&work, &app]
        .iter()
        .map(|p| proc_ticks(&format!("/proc/{}/stat", p.0.id())))
        .sum();
    drop((app, work));
    PostgresStore::drop_schema(url, &schema).await?;
    Ok((checkpoints / secs, ticks as f64 * 1e4 / checkpoints))
}

/// The number in the environment variable `key`, or `default`.
fn env(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn throughput_row(url: &str, scale: f64, payload: usize) -> Result<String, BoxError> {
    let runs = env("BENCH_PG_RUNS", 1000);
    let n = scaled(env("BENCH_PG_CHECKPOINTS", 20), scale) as u32;
    let rounds = env("BENCH_ROUNDS", 3).max(1);
    let per_tx = 1000;
    let total = runs * n as usize;
    let bytes: Vec<u8> = (0..payload.max(1)).map(|i| i as u8).collect();
    let raw = connect(url).await?;
    eprintln!(
        "postgres throughput: warm-up, {runs} runs x {} checkpoints ...",
        (n / 5).max(1)
    );
    two_workers(url, runs, (n / 5).max(1), 0).await?;
    let mut measured = Vec::new();
    for round in 1..=rounds {
        eprintln!(
            "postgres throughput, round {round}/{rounds}: raw floor ({total} rows, {per_tx} per tx), then {runs} runs x {n} checkpoints on two worker processes, then the raw floor again ..."
        );
        let floor = || async {
            let raw_schema = schema_name("rawtp");
            raw_table(&raw, &raw_schema).await?;
            let floor = raw_batched(&raw, &raw_schema, &bytes, total, per_tx).await?;
            raw.batch_execute(&format!("DROP SCHEMA {raw_schema} CASCADE"))
                .await?;
            Ok::<f64, BoxError>(floor)
        };
        let before = floor().await?;
        let fenced_schema = schema_name("fencedtp");
        raw_table(&raw, &fenced_schema).await?;
        fenced_tables(&raw, &fenced_schema, runs).await?;
        let fenced = fenced_batched(&raw, &fenced_schema, &bytes, total, runs).await?;
        raw.batch_execute(&format!("DROP SCHEMA {fenced_schema} CASCADE"))
            .await?;
        let (ours, worker_us) = two_workers(url, runs, n, 0).await?;
        // The floor on this VM moves by a third between minutes: the mean
        // of the one just before and the one just after.
        let floor = (before + floor().await?) / 2.0;
        measured.push((ours / floor, ours, floor, fenced, worker_us));
    }
    let in_order: Vec<String> = measured
        .iter()
        .map(|(r, o, f, ..)| format!("{:.1}% = {:.0}/{:.0}", r * 100.0, o, f))
        .collect();
    let mut fenced_of_floor: Vec<f64> = measured.iter().map(|m| m.3 / m.2).collect();
    fenced_of_floor.sort_by(f64::total_cmp);
    let fenced_of_floor = fenced_of_floor[fenced_of_floor.len() / 2];
    measured.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (ratio, ours, floor, fenced, worker_us) = measured[measured.len() / 2];
    Ok(format!(
        "| PostgreSQL durable checkpoints/s, {runs} runs x {n} checkpoints of {payload} B on two worker processes (one starts the runs and awaits their results; median of {rounds} rounds, each against the mean of its own raw floors just before and just after) | {ours:.0}/s (the worker processes' CPU: {worker_us:.1} us per checkpoint) | raw batched inserts ({per_tx} rows per INSERT ... unnest, one tx each, {total} rows): {floor:.0} rows/s; fenced floor (every run's row UPDATEd, fenced on epoch and latest seq, and its checkpoint's row INSERTed, {runs} runs per statement and tx, one connection): {fenced:.0} rows/s = {:.1}% of raw (median of the rounds), ours = {:.1}% of it | {:.1}% (rounds in order: {}) | >= 50% of raw batched | {} |",
        fenced_of_floor * 100.0,
        ours / fenced * 100.0,
        ratio * 100.0,
        in_order.join(", "),
        met(ratio >= 0.5),
    ))
}

/// The crowded case (see the module docs).
async fn crowded_row(url: &str, scale: f64) -> Result<String, BoxError> {
    let runs = env("BENCH_PG_RUNS", 1000);
    let n = scaled(env("BENCH_PG_CHECKPOINTS", 20), scale) as u32;
    let waiting = env("BENCH_PG_WAITING", 20_000);
    let rounds = env("BENCH_ROUNDS", 3).max(1);
    let mut measured = Vec::new();
    for round in 1..=rounds {
        eprintln!(
            "postgres crowded, round {round}/{rounds}: {runs} runs x {n} checkpoints on two worker processes, in an empty store, then beside {waiting} waiting runs ..."
        );
        let (empty, _) = two_workers(url, runs, n, 0).await?;
        let (crowded, _) = two_workers(url, runs, n, waiting).await?;
        measured.push((crowded / empty, crowded, empty));
    }
    let in_order: Vec<String> = measured
        .iter()
        .map(|(r, c, e)| format!("{r:.2} = {c:.0}/{e:.0}"))
        .collect();
    measured.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (ratio, crowded, empty) = measured[measured.len() / 2];
    Ok(format!(
        "| PostgreSQL durable checkpoints/s beside {waiting} runs waiting for a signal, {runs} runs x {n} checkpoints on two worker processes (median of {rounds} rounds) | {crowded:.0}/s | the same in an empty store, alternating: {empty:.0}/s | {ratio:.2}x (rounds in order: {}) | >= 0.8x | {} |",
        in_order.join(", "),
        met(ratio >= 0.8),
    ))
}
