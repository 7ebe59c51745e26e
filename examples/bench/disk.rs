//! A database's files as the bench table measures them: its size with
//! its `-wal` file (open, and once folded), the WAL's live frames and its
//! largest size while a measurement runs (`WalWatch`), copying and removing
//! a database with its side files, and flushing the machine's dirty pages
//! between measurements (`settle`). Shared by the SQLite sections.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;

/// `path`'s `-wal` file.
pub(crate) fn wal_path(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}-wal", path.display()))
}

pub(crate) fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Disk use of the database at `path` as a user sees it now, with its
/// connections open: the file and its `-wal` file (the `-shm` index is
/// memory shared through a file of a few KiB; not counted).
pub(crate) fn disk_size(path: &Path) -> u64 {
    file_len(path) + file_len(&wal_path(path))
}

/// The WAL at `path`: its page size, and the frames that follow its header
/// with the header's salts: those written since the WAL last started over,
/// which a recovery after a crash reads (the rest of the file is stale).
pub(crate) fn wal_live_frames(path: &Path) -> (u64, u64) {
    let wal = std::fs::read(wal_path(path)).unwrap_or_default();
    let Some(page) = wal.get(8..12) else {
        return (0, 0);
    };
    let page = u32::from_be_bytes(page.try_into().expect("4 bytes")) as usize;
    let salts = &wal[16..24];
    let (mut frames, mut at) = (0u64, 32usize);
    while at + 24 + page <= wal.len() && &wal[at + 8..at + 16] == salts {
        frames += 1;
        at += 24 + page;
    }
    (page as u64, frames)
}

/// Watches the size of a database's `-wal` file from a thread of its own
/// (every 2 ms) until stopped.
pub(crate) struct WalWatch {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl WalWatch {
    pub(crate) fn start(db: &Path) -> WalWatch {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (wal, flag) = (wal_path(db), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut max = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                max = max.max(file_len(&wal));
                std::thread::sleep(Duration::from_millis(2));
            }
            max.max(file_len(&wal))
        });
        WalWatch { stop, thread }
    }

    /// The largest size seen, in bytes.
    pub(crate) fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or(0)
    }
}

/// File size of the database at `path` once every connection is closed (the
/// last close checkpoints the WAL into the main file).
pub(crate) fn db_size(path: &Path) -> u64 {
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    // Still open somewhere (a dropped runtime closes its store once its
    // background tasks end): fold the WAL in first, until nothing is left.
    let since = Instant::now();
    while std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0)
        && since.elapsed() < Duration::from_secs(30)
    {
        let busy = Connection::open(path)
            .and_then(|c| {
                c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    r.get::<_, i64>(0)
                })
            })
            .unwrap_or(1);
        if busy != 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Copies the database at `from` with its `-wal` and `-shm` files to `to`.
pub(crate) fn copy_db(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::copy(from, to)?;
    for suffix in ["-wal", "-shm"] {
        let f = PathBuf::from(format!("{}{suffix}", from.display()));
        if f.exists() {
            std::fs::copy(&f, format!("{}{suffix}", to.display()))?;
        }
    }
    Ok(())
}

pub(crate) fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// Flushes every dirty page of the machine (`sync`), so that the write-back
/// of one measurement (a closed database's WAL checkpoint, a raw floor's
/// rows) does not slow down the fsyncs of the next.
pub(crate) fn settle() {
    let _ = std::process::Command::new("sync").status();
}
