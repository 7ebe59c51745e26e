//! The schema documents a runtime's store holds, as far as the runtime
//! knows: each is stored once per runtime (`Store::put_schemas`), before
//! the first checkpoint that refers to it. Runs that reach their first
//! checkpoints together (a thousand runs started at once) find the same
//! schemas missing: the first stores them and the others wait for it,
//! where each used to store them again (a statement and a round trip per
//! run).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use tokio::sync::watch;

use super::SchemaRef;
use crate::store::Store;

/// The schema keys a runtime stored, and those being stored (see the
/// module docs).
#[derive(Default)]
pub(crate) struct StoredSchemas {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    stored: HashSet<&'static str>,
    /// Keys being stored, and where whoever stores them tells whether it
    /// did (`None` until then).
    storing: HashMap<&'static str, watch::Receiver<Option<bool>>>,
}

impl StoredSchemas {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Has `schemas` stored in `store` unless this runtime stored them
    /// already; waits for those another run is storing. Whether all of
    /// them are stored (a failure only costs the JSON view of their
    /// fields; the caller asks again at its next checkpoint).
    pub(crate) async fn ensure(&self, store: &dyn Store, schemas: &[&'static SchemaRef]) -> bool {
        let (done, answer) = watch::channel(None);
        let (mine, theirs) = {
            let mut state = self.lock();
            let (mut mine, mut theirs) = (Vec::new(), Vec::new());
            for s in schemas {
                if state.stored.contains(s.key) || mine.iter().any(|m: &&SchemaRef| m.key == s.key)
                {
                    continue;
                }
                match state.storing.get(s.key) {
                    Some(rx) => theirs.push(rx.clone()),
                    None => mine.push(*s),
                }
            }
            for s in &mine {
                state.storing.insert(s.key, answer.clone());
            }
            (mine, theirs)
        };
        let mut all = true;
        if !mine.is_empty() {
            // Should this be dropped while it stores (its run cancelled),
            // the keys are free again, and those waiting see no answer.
            let storing = Storing {
                schemas: self,
                keys: &mine,
            };
            let pairs = mine
                .iter()
                .map(|s| (s.key.to_owned(), s.json.to_owned()))
                .collect();
            let ok = store.put_schemas(pairs).await.is_ok();
            if ok {
                self.lock().stored.extend(mine.iter().map(|s| s.key));
            }
            drop(storing);
            let _ = done.send(Some(ok));
            all &= ok;
        }
        for mut rx in theirs {
            let ok = match rx.wait_for(Option::is_some).await {
                Ok(ok) => ok.unwrap_or(false),
                Err(_) => false,
            };
            all &= ok;
        }
        all
    }
}

/// Keys being stored, freed when the storing ends (or is dropped).
struct Storing<'a> {
    schemas: &'a StoredSchemas,
    keys: &'a [&'static SchemaRef],
}

impl Drop for Storing<'_> {
    fn drop(&mut self) {
        let mut state = self.schemas.lock();
        for s in self.keys {
            state.storing.remove(s.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::store::MemoryStore;

    static A: SchemaRef = SchemaRef {
        key: "aaaaaaaaaaaaaaaa",
        json: "{\"a\":1}",
    };
    static B: SchemaRef = SchemaRef {
        key: "bbbbbbbbbbbbbbbb",
        json: "{\"b\":2}",
    };

    fn calls(store: &MemoryStore) -> usize {
        store.schema_puts.lock().unwrap().calls
    }

    /// Fifty runs at their first checkpoint at once: one stores, the
    /// others wait for it, and all find the schemas stored.
    #[tokio::test]
    async fn runs_at_once_store_each_schema_once() {
        let store = Arc::new(MemoryStore::new());
        store.schema_puts.lock().unwrap().delay = Some(Duration::from_millis(50));
        let schemas = Arc::new(StoredSchemas::default());
        let mut all = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let (store, schemas) = (store.clone(), schemas.clone());
            all.spawn(async move { schemas.ensure(&*store, &[&A, &B]).await });
        }
        while let Some(ok) = all.join_next().await {
            assert!(ok.unwrap());
        }
        assert_eq!(calls(&store), 1);
        let keys = vec![A.key.to_owned(), B.key.to_owned()];
        assert_eq!(store.schemas(&keys).await.unwrap().len(), 2);
        // Stored: never again.
        assert!(schemas.ensure(&*store, &[&B]).await);
        assert_eq!(calls(&store), 1);
    }

    /// A failed store is seen by those that waited for it, and the next
    /// checkpoint tries again.
    #[tokio::test]
    async fn a_failed_store_is_tried_again() {
        let store = Arc::new(MemoryStore::new());
        {
            let mut puts = store.schema_puts.lock().unwrap();
            (puts.delay, puts.fail) = (Some(Duration::from_millis(50)), true);
        }
        let schemas = Arc::new(StoredSchemas::default());
        let waiter = {
            let (store, schemas) = (store.clone(), schemas.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                schemas.ensure(&*store, &[&A]).await
            })
        };
        assert!(!schemas.ensure(&*store, &[&A]).await);
        assert!(!waiter.await.unwrap(), "the waiter saw the failure");
        assert_eq!(calls(&store), 1);
        store.schema_puts.lock().unwrap().fail = false;
        assert!(schemas.ensure(&*store, &[&A]).await);
        assert_eq!(calls(&store), 2);
    }

    /// A store dropped halfway (its run cancelled) frees its keys: those
    /// waiting see no answer, and the next checkpoint stores them.
    #[tokio::test]
    async fn a_dropped_store_frees_its_keys() {
        let store = Arc::new(MemoryStore::new());
        store.schema_puts.lock().unwrap().delay = Some(Duration::from_millis(200));
        let schemas = Arc::new(StoredSchemas::default());
        let first = {
            let (store, schemas) = (store.clone(), schemas.clone());
            tokio::spawn(async move { schemas.ensure(&*store, &[&A]).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let waiter = {
            let (store, schemas) = (store.clone(), schemas.clone());
            tokio::spawn(async move { schemas.ensure(&*store, &[&A]).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        first.abort();
        assert!(first.await.is_err(), "cancelled");
        assert!(!waiter.await.unwrap(), "no answer came");
        store.schema_puts.lock().unwrap().delay = None;
        assert!(schemas.ensure(&*store, &[&A]).await);
        assert_eq!(calls(&store), 2);
    }
}
