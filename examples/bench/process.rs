//! What this process spent, read from `/proc/self`: the bytes it passed
//! to write syscalls and the CPU time of each of its threads (the SQLite
//! writer, the tokio executor). The latency, throughput and history rows
//! report their figures' CPU and write cost with these, for the runtime
//! and its raw floors alike.

/// Bytes this process has passed to write syscalls (`wchar` of /proc/self/io).
pub(crate) fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("wchar:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system, in clock ticks) of each thread of this process,
/// by thread id, with the thread's name.
pub(crate) fn thread_ticks() -> Vec<(u32, String, u64)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let Ok(tid) = task.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_owned();
        // Fields after the name: state(3) ... utime(14) stime(15).
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let tick = |i: usize| rest.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        out.push((tid, name, tick(11) + tick(12)));
    }
    out
}

/// CPU microseconds spent between two [`thread_ticks`] samples by the
/// busiest `checkpoint-sqlite-*` thread and by the main thread.
pub(crate) fn cpu_split(before: &[(u32, String, u64)], after: &[(u32, String, u64)]) -> (f64, f64) {
    let tick_us = 1e6 / 100.0; // USER_HZ
    let main = std::process::id();
    let spent = |tid: u32, now: u64| {
        let was = before.iter().find(|b| b.0 == tid).map_or(0, |b| b.2);
        now.saturating_sub(was) as f64 * tick_us
    };
    let mut writer = 0f64;
    let mut main_us = 0f64;
    for (tid, name, now) in after {
        let us = spent(*tid, *now);
        if *tid == main {
            main_us = us;
        } else if name.starts_with("checkpoint-sql") {
            writer = writer.max(us);
        }
    }
    (writer, main_us)
}

/// CPU microseconds spent between two [`thread_ticks`] samples by all the
/// threads alive at the second one.
pub(crate) fn cpu_total(before: &[(u32, String, u64)], after: &[(u32, String, u64)]) -> f64 {
    let tick_us = 1e6 / 100.0; // USER_HZ
    after
        .iter()
        .map(|(tid, _, now)| {
            let was = before.iter().find(|b| b.0 == *tid).map_or(0, |b| b.2);
            now.saturating_sub(was) as f64 * tick_us
        })
        .sum()
}
