//! The conformance suite on the embedded store, opened from a temporary directory.

use async_trait::async_trait;

use super::*;
use crate::store::conformance::{self, Harness};
use crate::store::Store;

/// Embedded stores in one temporary directory, opened again from it.
/// The page cache of the stores the checks open.
const CACHE_BYTES: u64 = 16 * 1024 * 1024;

struct OnDisk {
    dir: tempfile::TempDir,
    key: SecretKey,
    /// Where the last fresh store lives (a check uses one store at a time).
    last: std::sync::Mutex<Option<PathBuf>>,
}

#[async_trait]
impl Harness for OnDisk {
    async fn fresh(&self) -> Store {
        let path = self.dir.path().join(uuid::Uuid::new_v4().to_string());
        *self.last.lock().unwrap() = Some(path.clone());
        let opened = Embedded::open(&path, CACHE_BYTES, &self.key);
        Store::new(Arc::new(opened.expect("a fresh store opens")))
    }

    async fn reopen(&self, store: Store) -> Store {
        let path = self
            .last
            .lock()
            .unwrap()
            .clone()
            .expect("a fresh store first");
        drop(store);
        let reopened = tokio::task::spawn_blocking({
            let key = self.key.clone();
            move || Embedded::open(&path, CACHE_BYTES, &key)
        });
        Store::new(Arc::new(
            reopened.await.unwrap().expect("the store opens again"),
        ))
    }
}

fn on_disk() -> OnDisk {
    OnDisk {
        dir: tempfile::tempdir().unwrap(),
        key: SecretKey::generate(),
        last: std::sync::Mutex::default(),
    }
}

macro_rules! conformance_on_disk {
    ($($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $check() {
                conformance::$check(&on_disk()).await;
            }
        )*
    };
}

conformance::every_check!(conformance_on_disk);
