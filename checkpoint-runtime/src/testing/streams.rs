//! The harness's check of a run's stream (`ctx.emit`): after a crash and
//! a resume, the stored stream must hold the items of the uninterrupted
//! run, each index once, with the same values.

use crate::store::{Store, STREAM_PAGE_MAX};
use crate::Error;

/// Run `id`'s stored stream, `(index, JSON)`, read page by page.
pub(super) async fn stored(store: &dyn Store, id: &str) -> Result<Vec<(u64, Vec<u8>)>, Error> {
    let mut out = Vec::new();
    let mut next = 0;
    loop {
        let page = store.stream_items(id, next, STREAM_PAGE_MAX).await?;
        let Some(last) = page.last() else {
            return Ok(out);
        };
        next = last.index + 1;
        out.extend(page.into_iter().map(|i| (i.index, i.value)));
    }
}

/// How `got` differs from `expected`, if it does.
pub(super) fn differs(got: &[(u64, Vec<u8>)], expected: &[(u64, Vec<u8>)]) -> Option<String> {
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    for (i, want) in expected.iter().enumerate() {
        match got.get(i) {
            Some(have) if have == want => {}
            Some((index, value)) => {
                return Some(format!(
                    "the resumed run's stream holds item {index} = {} where the uninterrupted \
                     run's holds item {} = {}",
                    text(value),
                    want.0,
                    text(&want.1)
                ))
            }
            None => {
                return Some(format!(
                    "the resumed run's stream ends after {} items, the uninterrupted run's \
                     holds {}",
                    got.len(),
                    expected.len()
                ))
            }
        }
    }
    (got.len() > expected.len()).then(|| {
        format!(
            "the resumed run's stream holds {} items, the uninterrupted run's {}",
            got.len(),
            expected.len()
        )
    })
}
