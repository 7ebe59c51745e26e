//! Checksums of stored checkpoints, and the errors that report a damaged
//! one.
//!
//! A durable backend seals every checkpoint it writes ([`checksums`]) and
//! checks the seal on every read that rebuilds one ([`verify_checksums`]):
//! resuming, listing, inspecting, forking. A flipped bit in a field's bytes,
//! or in what locates them (the references to the rows holding them, the
//! site, the field list, the sequence number, the loop positions), is then
//! an [`Error::Decode`] naming the run, the site and the field, never a
//! resumed run computing with a wrong value.
//!
//! The seal is CRC-32 (the `crc32fast` crate, which uses the processor's
//! carry-less multiply where there is one: several GB/s): one over the bytes
//! of each field, so that a mismatch names the field, and one over the
//! checkpoint's metadata, so that bytes read from the wrong place or under
//! the wrong name are caught too. The metadata sum is taken over the record
//! as the executor sees it (run id, seq, site, label, loop positions, each field's name, type, schema key, offset and length, the
//! size, the suspension and the time), not over a backend's columns: a
//! backend that stores a record differently (SQLite shares unchanged fields
//! with earlier rows and interns the field list) still checks everything
//! that decides what the run resumes with. CRC-32 detects every error of one
//! or two bits in a checkpoint of any realistic size, every error of three
//! bits in a field under 11 KB, and every burst of up to 32 bits; other
//! damage goes unnoticed with a chance of about one in four billion.
//!
//! A seal is `[2, metadata CRC, field CRC...]`: a format byte, then
//! little-endian `u32`s. A checkpoint written before seals existed has none
//! and is read unchecked; one sealed in format 1 (before 2026-12-05) is
//! checked with [`verify_stored_checksums`].
//!
//! ```
//! use std::borrow::Cow;
//! use std::sync::Arc;
//! use std::time::SystemTime;
//! use checkpoint_runtime::store::{
//!     checksums, verify_checksums, ChecksumMismatch, CheckpointRecord, FieldRecord,
//! };
//!
//! let field = FieldRecord {
//!     name: Cow::Borrowed("total"),
//!     type_name: Cow::Borrowed("u32"),
//!     offset: 0,
//!     len: 1,
//! };
//! let cp = CheckpointRecord::new(
//!     Arc::from("run-1"), 1, Cow::Borrowed("counted"), None, vec![],
//!     vec![field], vec![7], None, SystemTime::now(),
//! );
//! let seal = checksums(&cp);
//! assert_eq!(verify_checksums(&cp, &seal), Ok(()));
//!
//! let mut flipped = cp.clone();
//! flipped.data[0] ^= 1;
//! let err = verify_checksums(&flipped, &seal).unwrap_err();
//! assert_eq!(err, ChecksumMismatch::Field { index: 0 });
//! let err = err.to_error(&flipped, Some("tally"));
//! assert!(err.to_string().starts_with(
//!     "cannot decode field `total` of run `run-1` (workflow `tally`) at site `counted`"
//! ));
//! ```

use std::time::{SystemTime, UNIX_EPOCH};

pub(crate) use super::records::UNREADABLE;
use super::records::{CheckpointRecord, RetryOutcome, Suspend};
use crate::Error;

/// The first byte of a seal of today's format.
const FORMAT: u8 = 2;

/// The first byte of a seal written before 2026-12-05, whose metadata sum
/// also covered the site's 0-based index in its workflow's site table (a
/// value records no longer carry: nothing read it back). A backend that kept
/// that index beside such a checkpoint passes it to
/// [`verify_stored_checksums`].
const FORMAT_1: u8 = 1;

/// The seal of `cp`: the checksums a durable store keeps with it and checks
/// with [`verify_checksums`] on every read that rebuilds it, so that a
/// flipped bit in the stored bytes, or in what locates or names them, is
/// refused (an [`Error::Decode`] naming the run, the site and the field),
/// never resumed as a wrong value.
///
/// A seal is `[2, metadata CRC, field CRC...]`: a format byte, then
/// little-endian CRC-32s, 4 bytes each: one over each field's bytes (so
/// that a mismatch names the field) and one over the record's metadata, as
/// the executor sees it (run id, seq, site, label, loop positions, each
/// field's name, type, schema key, offset and length, the
/// size, the suspension and the time), whatever a backend's columns are.
/// CRC-32 detects every error of one or two bits at any size a checkpoint
/// has, and any burst of up to 32 bits; other damage passes with a chance
/// of about one in four billion. About 0.4 µs for a 1 KB checkpoint of four
/// fields (`cargo bench -p checkpoint-runtime --bench checksum`).
///
/// ```
/// # use std::{borrow::Cow, sync::Arc, time::SystemTime};
/// # use checkpoint_runtime::store::{checksums, CheckpointRecord};
/// let cp = CheckpointRecord::new(
///     Arc::from("r"), 1, Cow::Borrowed("site"), None, vec![], vec![], vec![], None,
///     SystemTime::now(),
/// );
/// assert_eq!(checksums(&cp).len(), 5);
/// ```
pub fn checksums(cp: &CheckpointRecord) -> Vec<u8> {
    seal_of(
        metadata_sum(cp),
        (0..cp.fields.len()).map(|i| field_sum(cp, i)),
    )
}

/// The seal made of a metadata sum ([`metadata_sum`]) and field sums
/// ([`field_sum`], in field order): what [`checksums`] returns when they
/// are a record's.
pub(crate) fn seal_of(meta: u32, fields: impl ExactSizeIterator<Item = u32>) -> Vec<u8> {
    let mut seal = Vec::with_capacity(5 + 4 * fields.len());
    seal.push(FORMAT);
    seal.extend_from_slice(&meta.to_le_bytes());
    for sum in fields {
        seal.extend_from_slice(&sum.to_le_bytes());
    }
    seal
}

/// The field sums of a seal, if it is one of the current format.
#[cfg(any(test, feature = "sqlite"))]
pub(crate) fn field_sums(seal: &[u8]) -> Option<Vec<u32>> {
    let (&format, rest) = seal.split_first()?;
    if format != FORMAT && format != FORMAT_1 || rest.len() % 4 != 0 || rest.len() < 4 {
        return None;
    }
    Some(
        rest.chunks_exact(4)
            .skip(1)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// The [`field_sum`] of bytes `new_header ++ body ++ tail`, where `body` is
/// what follows the first `old_header.len()` bytes of bytes whose sum is
/// `old_sum` (`body_len` bytes): without reading the body, since CRC-32 of
/// a concatenation follows from the parts' (`crc32fast::Hasher::combine`).
/// A field that grew by appending is sealed this way at the cost of its
/// header and tail; the caller must know that the body is the same bytes.
#[cfg(any(test, feature = "sqlite"))]
pub(crate) fn extended_sum(
    old_sum: u32,
    old_header: &[u8],
    body_len: u64,
    new_header: &[u8],
    tail: &[u8],
) -> u32 {
    use crc32fast::Hasher;
    // CRC(a ++ b) = shift(CRC(a), len b) ^ CRC(b), so CRC(b) is
    // shift(CRC(a), len b) ^ CRC(a ++ b): the same combination.
    let mut body = Hasher::new_with_initial_len(crc32fast::hash(old_header), 0);
    body.combine(&Hasher::new_with_initial_len(old_sum, body_len));
    let body = body.finalize();
    let mut sum = Hasher::new();
    sum.update(new_header);
    sum.combine(&Hasher::new_with_initial_len(body, body_len));
    let mut rest = Hasher::new();
    rest.update(tail);
    sum.combine(&rest);
    sum.finalize()
}

/// Checks `cp`, as read back, against the `seal` stored with it
/// ([`checksums`] of the record that was written). The fields are checked
/// first, so that damaged bytes are named by their field.
///
/// ```
/// # use std::{borrow::Cow, sync::Arc, time::SystemTime};
/// # use checkpoint_runtime::store::{checksums, verify_checksums, ChecksumMismatch, CheckpointRecord};
/// let cp = CheckpointRecord::new(
///     Arc::from("r"), 4, Cow::Borrowed("site"), None, vec![], vec![], vec![], None,
///     SystemTime::now(),
/// );
/// let seal = checksums(&cp);
/// let mut renumbered = cp.clone();
/// renumbered.seq = 5;
/// assert_eq!(verify_checksums(&renumbered, &seal), Err(ChecksumMismatch::Metadata));
/// assert_eq!(verify_checksums(&cp, &seal[..3]), Err(ChecksumMismatch::Unreadable));
/// ```
pub fn verify_checksums(cp: &CheckpointRecord, seal: &[u8]) -> Result<(), ChecksumMismatch> {
    verify_stored_checksums(cp, seal, None)
}

/// [`verify_checksums`] for a backend that may hold seals of format 1
/// (written before 2026-12-05), whose metadata sum also covered the site's
/// 0-based index in its workflow's site table at the time:
/// `format_1_site_index` is that index as the backend stored it. Without
/// it, such a seal is checked on its fields' bytes only. Seals of today's
/// format do not use it.
///
/// ```
/// # use std::{borrow::Cow, sync::Arc, time::SystemTime};
/// # use checkpoint_runtime::store::{checksums, verify_stored_checksums, CheckpointRecord};
/// let cp = CheckpointRecord::new(
///     Arc::from("r"), 4, Cow::Borrowed("site"), None, vec![], vec![], vec![], None,
///     SystemTime::now(),
/// );
/// // Today's seals are checked the same with or without a stored index.
/// assert_eq!(verify_stored_checksums(&cp, &checksums(&cp), Some(7)), Ok(()));
/// ```
pub fn verify_stored_checksums(
    cp: &CheckpointRecord,
    seal: &[u8],
    format_1_site_index: Option<u32>,
) -> Result<(), ChecksumMismatch> {
    let legacy_index = match seal.split_first() {
        Some((&FORMAT, _)) => None,
        Some((&FORMAT_1, _)) => Some(format_1_site_index),
        _ => return Err(ChecksumMismatch::Unreadable),
    };
    let rest = &seal[1..];
    if rest.len() % 4 != 0 || rest.len() < 4 {
        return Err(ChecksumMismatch::Unreadable);
    }
    let mut sums = rest
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    let meta = sums.next().ok_or(ChecksumMismatch::Unreadable)?;
    let stored = sums.len();
    if stored != cp.fields.len() {
        return Err(ChecksumMismatch::FieldCount {
            stored,
            found: cp.fields.len(),
        });
    }
    for (index, sum) in sums.enumerate() {
        if field_sum(cp, index) != sum {
            return Err(ChecksumMismatch::Field { index });
        }
    }
    let expected = match legacy_index {
        None => metadata_sum(cp),
        Some(Some(index)) => metadata_sum_format_1(cp, index),
        // A format-1 seal whose site index was not kept: its fields matched.
        Some(None) => return Ok(()),
    };
    if expected != meta {
        return Err(ChecksumMismatch::Metadata);
    }
    Ok(())
}

/// Why [`verify_checksums`] refused a checkpoint.
///
/// ```
/// use checkpoint_runtime::store::ChecksumMismatch;
/// let m = ChecksumMismatch::FieldCount { stored: 2, found: 3 };
/// assert_eq!(
///     m.to_string(),
///     "it has 3 fields where its checksums were taken over 2: its field list is damaged"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChecksumMismatch {
    /// The seal itself is not one (too short, or of an unknown format).
    Unreadable,
    /// The record has another number of fields than the seal.
    FieldCount {
        /// Fields in the seal.
        stored: usize,
        /// Fields in the record read back.
        found: usize,
    },
    /// The bytes of field `index` differ from those written.
    Field {
        /// The field's position in [`CheckpointRecord::fields`].
        index: usize,
    },
    /// The bytes are as written, but something that locates or names them
    /// is not (the site, the field list, the sequence number, the loop
    /// positions, the layout, the suspension, the time).
    Metadata,
}

impl std::fmt::Display for ChecksumMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChecksumMismatch::Unreadable => f.write_str("its stored checksums are unreadable"),
            ChecksumMismatch::FieldCount { stored, found } => write!(
                f,
                "it has {found} fields where its checksums were taken over {stored}: \
                 its field list is damaged"
            ),
            ChecksumMismatch::Field { .. } => {
                f.write_str("the field's bytes do not match the checksum stored with them")
            }
            ChecksumMismatch::Metadata => f.write_str(
                "its site, field list, sequence number or loop positions do not match \
                 the checksum stored with them",
            ),
        }
    }
}

impl std::error::Error for ChecksumMismatch {}

impl ChecksumMismatch {
    /// The error a store returns for this mismatch in `cp` (read back as a
    /// checkpoint of a run of workflow `workflow`, when known): an
    /// [`Error::Decode`] naming the run, the site and the field (every field
    /// when the damage is not in one).
    ///
    /// ```
    /// # use std::{borrow::Cow, sync::Arc, time::SystemTime};
    /// # use checkpoint_runtime::{store::{CheckpointRecord, ChecksumMismatch}, Error};
    /// let cp = CheckpointRecord::new(
    ///     Arc::from("r-1"), 3, Cow::Borrowed("step"), None, vec![], vec![], vec![], None,
    ///     SystemTime::now(),
    /// );
    /// let err = ChecksumMismatch::Metadata.to_error(&cp, Some("wf"));
    /// assert!(matches!(&err, Error::Decode { run, field, .. } if run == "r-1" && field == "-"));
    /// assert!(err.to_string().contains("checkpoint #3 is damaged"));
    /// ```
    pub fn to_error(&self, cp: &CheckpointRecord, workflow: Option<&str>) -> Error {
        let field = match self {
            ChecksumMismatch::Field { index } => cp
                .fields
                .get(*index)
                .map_or_else(|| format!("#{index}"), |f| f.name.to_string()),
            _ => field_list(cp.fields.iter().map(|f| &*f.name)),
        };
        damaged_checkpoint(
            &cp.run,
            cp.seq,
            workflow,
            Some(&cp.site_key),
            &field,
            format_args!("{self}"),
        )
    }
}

/// The error for damaged checkpoint `seq` of run `run`: an
/// [`Error::Decode`] naming the workflow and the site as far as they are
/// known, the field `field` (a name, several, or `-`), and `what` is wrong.
pub(crate) fn damaged_checkpoint(
    run: &str,
    seq: u64,
    workflow: Option<&str>,
    site: Option<&str>,
    field: &str,
    what: impl std::fmt::Display,
) -> Error {
    Error::Decode {
        workflow: workflow.unwrap_or(UNREADABLE).to_owned(),
        run: run.to_owned(),
        site: site.unwrap_or(UNREADABLE).to_owned(),
        field: field.to_owned(),
        detail: format!(
            "checkpoint #{seq} is damaged: {what}; it is refused rather than resumed \
             with wrong values (restore the store from a backup, or fork an intact \
             version of the run)"
        )
        .into(),
    }
}

/// Field names as an error names them together: `a, b`, or `-` for none.
pub(crate) fn field_list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.into_iter().collect();
    if names.is_empty() {
        "-".to_owned()
    } else {
        names.join(", ")
    }
}

pub(crate) fn field_sum(cp: &CheckpointRecord, i: usize) -> u32 {
    crc32fast::hash(cp.field_bytes(i).unwrap_or_default())
}

/// The CRC of everything in `cp` but its fields' bytes, each part
/// length-prefixed so that no two records feed it the same bytes.
pub(crate) fn metadata_sum(cp: &CheckpointRecord) -> u32 {
    metadata_sum_after(cp, |_| ())
}

/// A seal of format 1 of `cp`, as it was written when `cp`'s site had
/// index `site_index` in its workflow's site table (for tests of checkpoints
/// stored before format 2).
#[cfg(test)]
pub(crate) fn format_1_seal(cp: &CheckpointRecord, site_index: u32) -> Vec<u8> {
    let sums = (0..cp.fields.len()).map(|i| field_sum(cp, i));
    let mut seal = seal_of(metadata_sum_format_1(cp, site_index), sums);
    seal[0] = FORMAT_1;
    seal
}

/// The metadata sum of a format-1 seal: `site_index` was fed after the
/// label.
fn metadata_sum_format_1(cp: &CheckpointRecord, site_index: u32) -> u32 {
    metadata_sum_after(cp, |h| h.u64(u64::from(site_index)))
}

/// The metadata sum, with `legacy` feeding what an older format fed after
/// the label.
fn metadata_sum_after(cp: &CheckpointRecord, legacy: impl FnOnce(&mut Feed)) -> u32 {
    let mut h = Feed::new();
    h.text(&cp.run);
    h.u64(cp.seq);
    h.text(&cp.site_key);
    h.opt_text(cp.label.as_deref());
    legacy(&mut h);
    h.u64(cp.loops.len() as u64);
    for &l in &cp.loops {
        h.u64(l);
    }
    h.u64(cp.fields.len() as u64);
    for (i, f) in cp.fields.iter().enumerate() {
        h.text(&f.name);
        h.text(&f.type_name);
        h.opt_text(cp.schema_key(i));
        h.u64(f.offset as u64);
        h.u64(f.len as u64);
    }
    h.u64(cp.data.len() as u64);
    match &cp.suspend {
        None => h.u64(0),
        Some(Suspend::Waiting {
            signal,
            deadline,
            payload_schema,
            sites_before,
        }) => {
            h.u64(1);
            h.text(signal);
            match deadline {
                None => h.u64(0),
                Some(d) => {
                    h.u64(1);
                    h.time(*d);
                }
            }
            // Only when present, so that checkpoints stored before the
            // payload schema existed keep their checksums.
            if let Some(key) = payload_schema {
                h.u64(1);
                h.text(key);
            }
            feed_sites_before(&mut h, sites_before);
        }
        Some(Suspend::Sleeping {
            until,
            sites_before,
            retry,
        }) => {
            h.u64(2);
            h.time(*until);
            feed_sites_before(&mut h, sites_before);
            // Only when present, so that the checksums of sleeps stay.
            if let Some(mark) = retry {
                h.u64(3);
                h.text(&mark.name);
                h.u64(u64::from(mark.attempts));
                match &mark.outcome {
                    None => h.u64(0),
                    Some(RetryOutcome::Ok(v)) => {
                        h.u64(1);
                        h.text(v);
                    }
                    Some(RetryOutcome::Exhausted(e)) => {
                        h.u64(2);
                        h.text(e);
                    }
                    Some(RetryOutcome::NotRetryable(e)) => {
                        h.u64(3);
                        h.text(e);
                    }
                    Some(RetryOutcome::TimedOut) => h.u64(4),
                    Some(RetryOutcome::Cancelled(reason)) => {
                        h.u64(5);
                        h.text(reason);
                    }
                }
            }
        }
        Some(Suspend::Joining {
            children,
            token,
            sites_before,
        }) => {
            h.u64(3);
            h.text(token);
            h.u64(children.len() as u64);
            for child in children {
                h.text(child);
            }
            feed_sites_before(&mut h, sites_before);
        }
    }
    h.time(cp.created_at);
    h.finish()
}

/// Feeds `sites_before` (only when present, so that checkpoints
/// stored before it existed keep their checksums).
fn feed_sites_before(h: &mut Feed, keys: &Option<Vec<String>>) {
    if let Some(keys) = keys {
        h.u64(2);
        h.u64(keys.len() as u64);
        for k in keys {
            h.text(k);
        }
    }
}

/// Feeds a CRC hasher with self-delimiting values, through a buffer: the
/// metadata is many short pieces, and each call into the hasher costs about
/// what hashing a few dozen bytes does.
struct Feed {
    crc: crc32fast::Hasher,
    buf: [u8; 256],
    len: usize,
}

impl Feed {
    fn new() -> Feed {
        Feed {
            crc: crc32fast::Hasher::new(),
            buf: [0; 256],
            len: 0,
        }
    }

    fn bytes(&mut self, b: &[u8]) {
        if self.len + b.len() > self.buf.len() {
            self.crc.update(&self.buf[..self.len]);
            self.len = 0;
            if b.len() > self.buf.len() {
                self.crc.update(b);
                return;
            }
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    fn text(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.bytes(s.as_bytes());
    }

    fn opt_text(&mut self, s: Option<&str>) {
        match s {
            None => self.u64(0),
            Some(s) => {
                self.u64(1);
                self.text(s);
            }
        }
    }

    /// A time as the SQL stores keep it: nanoseconds since the epoch,
    /// saturating (so that a time beyond their range, stored saturated,
    /// checks as it was written).
    fn time(&mut self, t: SystemTime) {
        let nanos = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
            Err(e) => i64::try_from(e.duration().as_nanos())
                .map(|n| -n)
                .unwrap_or(i64::MIN),
        };
        self.bytes(&nanos.to_le_bytes());
    }

    fn finish(mut self) -> u32 {
        self.crc.update(&self.buf[..self.len]);
        self.crc.finalize()
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::store::FieldRecord;

    #[test]
    fn an_extended_sum_is_the_sum_of_the_bytes() {
        let body: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        for (old_header, new_header, tail) in [
            (&[3u8][..], &[4u8][..], &[9u8, 8, 7][..]),
            (&[0x80, 0x01], &[0x81, 0x01], &[]),
            (&[], &[1, 2, 3], &[5; 600]),
            (&[7, 7], &[], &[1]),
        ] {
            let old = [old_header, &body].concat();
            let new = [new_header, &body, tail].concat();
            let sum = extended_sum(
                crc32fast::hash(&old),
                old_header,
                body.len() as u64,
                new_header,
                tail,
            );
            assert_eq!(sum, crc32fast::hash(&new));
        }
    }

    #[test]
    fn a_seal_gives_back_its_field_sums() {
        let cp = record();
        let seal = checksums(&cp);
        let sums: Vec<u32> = (0..cp.fields.len()).map(|i| field_sum(&cp, i)).collect();
        assert_eq!(field_sums(&seal), Some(sums.clone()));
        assert_eq!(seal_of(metadata_sum(&cp), sums.into_iter()), seal);
        assert_eq!(field_sums(&seal[..3]), None);
    }

    fn record() -> CheckpointRecord {
        let fields = vec![
            FieldRecord {
                name: Cow::Borrowed("goal"),
                type_name: Cow::Borrowed("alloc::string::String"),
                offset: 0,
                len: 3,
            },
            FieldRecord {
                name: Cow::Borrowed("done"),
                type_name: Cow::Borrowed("alloc::vec::Vec<u32>"),
                offset: 3,
                len: 2,
            },
        ];
        CheckpointRecord::new(
            Arc::from("r"),
            7,
            Cow::Borrowed("task_done"),
            Some(Cow::Borrowed("task_done")),
            vec![1, 9],
            fields,
            vec![2, b'h', b'i', 1, 9],
            Some(Suspend::Waiting {
                signal: "go".into(),
                deadline: Some(SystemTime::now() + Duration::from_secs(60)),
                payload_schema: None,
                sites_before: None,
            }),
            SystemTime::now(),
        )
        .with_schemas(vec![Some(Cow::Borrowed("k1")), None])
    }

    /// A checkpoint sealed in format 1 (before 2026-12-05), whose metadata
    /// sum also covered the site's index in the site table: the sum below
    /// was computed independently of this code, from the bytes format 1
    /// fed (`zlib.crc32` over them).
    #[test]
    fn a_format_1_seal_is_checked_against_the_stored_site_index() {
        let mut cp = record();
        cp.suspend = None;
        cp.created_at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(metadata_sum_format_1(&cp, 2), 0x0afb_0f42);
        let seal = format_1_seal(&cp, 2);
        assert_eq!(seal[0], 1);
        assert_eq!(verify_stored_checksums(&cp, &seal, Some(2)), Ok(()));
        assert_eq!(
            verify_stored_checksums(&cp, &seal, Some(3)),
            Err(ChecksumMismatch::Metadata)
        );
        let mut renamed = cp.clone();
        renamed.site_key = Cow::Borrowed("other");
        assert_eq!(
            verify_stored_checksums(&renamed, &seal, Some(2)),
            Err(ChecksumMismatch::Metadata)
        );
        // Without the stored index only the fields can be checked.
        assert_eq!(verify_checksums(&renamed, &seal), Ok(()));
        let mut flipped = cp.clone();
        flipped.data[0] ^= 1;
        assert_eq!(
            verify_checksums(&flipped, &seal),
            Err(ChecksumMismatch::Field { index: 0 })
        );
        // Today's seal does not depend on any index.
        assert_eq!(checksums(&cp)[0], FORMAT);
        assert_eq!(
            verify_stored_checksums(&cp, &checksums(&cp), Some(9)),
            Ok(())
        );
        assert_ne!(checksums(&cp)[1..5], seal[1..5]);
        assert_eq!(field_sums(&seal), field_sums(&checksums(&cp)));
    }

    #[test]
    fn every_bit_of_the_bytes_is_covered_and_named_by_its_field() {
        let cp = record();
        let seal = checksums(&cp);
        assert_eq!(seal.len(), 5 + 4 * 2);
        for bit in 0..cp.data.len() * 8 {
            let mut bad = cp.clone();
            bad.data[bit / 8] ^= 1 << (bit % 8);
            let index = if bit / 8 < 3 { 0 } else { 1 };
            assert_eq!(
                verify_checksums(&bad, &seal),
                Err(ChecksumMismatch::Field { index }),
                "bit {bit}"
            );
        }
    }

    #[test]
    fn metadata_changes_are_caught() {
        let cp = record();
        let seal = checksums(&cp);
        type Change = Box<dyn Fn(&mut CheckpointRecord)>;
        let changes: Vec<(&str, Change)> = vec![
            ("run", Box::new(|c| c.run = Arc::from("s"))),
            ("seq", Box::new(|c| c.seq = 8)),
            ("site", Box::new(|c| c.site_key = Cow::Borrowed("other"))),
            ("label", Box::new(|c| c.label = None)),
            ("loops", Box::new(|c| c.loops[1] = 8)),
            (
                "name",
                Box::new(|c| c.fields[1].name = Cow::Borrowed("dome")),
            ),
            (
                "type",
                Box::new(|c| c.fields[0].type_name = Cow::Borrowed("u8")),
            ),
            (
                "schema",
                Box::new(|c| c.schemas = Arc::from(vec![None, None])),
            ),
            ("suspension", Box::new(|c| c.suspend = None)),
            (
                "time",
                Box::new(|c| c.created_at += Duration::from_nanos(1)),
            ),
            ("size", Box::new(|c| c.data.push(0))),
        ];
        for (what, change) in changes {
            let mut bad = cp.clone();
            change(&mut bad);
            assert_eq!(
                verify_checksums(&bad, &seal),
                Err(ChecksumMismatch::Metadata),
                "{what}"
            );
        }
        // Bytes moved between fields (a damaged layout) name a field.
        let mut bad = cp.clone();
        bad.fields[0].len = 2;
        bad.fields[1].offset = 2;
        bad.fields[1].len = 3;
        assert_eq!(
            verify_checksums(&bad, &seal),
            Err(ChecksumMismatch::Field { index: 0 })
        );
        let mut bad = cp.clone();
        bad.fields.pop();
        assert_eq!(
            verify_checksums(&bad, &seal),
            Err(ChecksumMismatch::FieldCount {
                stored: 2,
                found: 1
            })
        );
    }

    #[test]
    fn a_damaged_seal_refuses_the_record() {
        let cp = record();
        let seal = checksums(&cp);
        assert_eq!(verify_checksums(&cp, &seal), Ok(()));
        for bit in 0..seal.len() * 8 {
            let mut bad = seal.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(verify_checksums(&cp, &bad).is_err(), "bit {bit}");
        }
        assert_eq!(
            verify_checksums(&cp, &[]),
            Err(ChecksumMismatch::Unreadable)
        );
        assert_eq!(
            verify_checksums(&cp, &seal[..seal.len() - 1]),
            Err(ChecksumMismatch::Unreadable)
        );
    }

    #[test]
    fn schema_keys_padded_or_not_check_alike() {
        // A backend may read back `[k, None]` for a record written with `[k]`.
        let cp = record().with_schemas(vec![Some(Cow::Borrowed("k1"))]);
        let padded = cp
            .clone()
            .with_schemas(vec![Some(Cow::Borrowed("k1")), None]);
        assert_eq!(verify_checksums(&padded, &checksums(&cp)), Ok(()));
    }

    #[test]
    fn mismatches_name_run_site_and_field() {
        let cp = record();
        let err = ChecksumMismatch::Field { index: 1 }.to_error(&cp, Some("wf"));
        assert_eq!(
            err.to_string(),
            "cannot decode field `done` of run `r` (workflow `wf`) at site `task_done`: \
             checkpoint #7 is damaged: the field's bytes do not match the checksum stored \
             with them; it is refused rather than resumed with wrong values (restore the \
             store from a backup, or fork an intact version of the run)"
        );
        let err = ChecksumMismatch::Metadata.to_error(&cp, None);
        assert!(
            matches!(&err, Error::Decode { workflow, field, .. }
                if workflow == UNREADABLE && field == "goal, done"),
            "{err}"
        );
    }
}
