//! [`EtcdCatalog`]: the cluster's [`Catalog`] in etcd, and the changes to it as a watch.
//!
//! Keys, under the cluster's prefix `P` (for example `/isochron/<cluster>/`):
//!
//! - `P/meta` → [`StoreMeta::encode`] (the same bytes as redb's `meta` table holds);
//! - `P/next_object_id` → the object-id counter, the next id to hand out, authoritative as in
//!   redb ([`Catalog::meta`] reports the larger of it and the record's field). It is 8 bytes
//!   **big-endian**, so that etcd's bytewise value compare orders it as a number:
//!   [`Catalog::insert_object`] checks "id below the counter" inside its transaction;
//! - `P/objects/<name>` → [`ObjectRecord::encode`].
//!
//! Every method is atomic: a single read, or an etcd transaction whose compares guard what the
//! method read (optimistic concurrency: on a conflict it reads again and retries, a bounded
//! number of times, then fails with [`CatalogError::Contended`]). Other keys under `P` (the
//! membership keys, [`crate::membership`]) are not the catalog's and are ignored.
//!
//! A node loads everything with [`EtcdCatalog::list_with_revision`] and follows the changes with
//! [`EtcdCatalog::watch`] from the listing's revision + 1, without a gap. A record that does not
//! decode is reported with its key (an error from a read, a [`CatalogChange::Invalid`] from the
//! watch), never skipped.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use isochron_base::ObjectId;
use isochron_store::catalog::{Catalog, CatalogError, ObjectRecord, StoreMeta, validate_name};

use crate::client::{Client, Compare, CompareOp, EtcdError, KeyValue, TxnOp, TxnResponse};
use crate::watch::{Watch, WatchCanceller, WatchError, WatchEvent};

/// The first object id handed out (as in redb: 0 matches no block header).
const FIRST_OBJECT_ID: u64 = 1;
/// Optimistic attempts before [`CatalogError::Contended`].
const MAX_ATTEMPTS: u32 = 100;

/// The [`Catalog`] of a cluster, in etcd under a prefix.
#[derive(Clone, Debug)]
pub struct EtcdCatalog {
    client: Client,
    prefix: String,
    /// What errors name as the catalog's location: `etcd:P`.
    location: PathBuf,
}

/// Everything in the catalog, read at one revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogListing {
    /// The store metadata (its `next_object_id` the counter's), if it was ever written.
    pub meta: Option<StoreMeta>,
    /// Every object, sorted by name.
    pub objects: Vec<ObjectRecord>,
    /// The revision of the read: watch from `revision + 1`.
    pub revision: i64,
}

/// One change of the catalog.
#[derive(Debug)]
pub enum CatalogChange {
    /// An object was inserted (or rewritten).
    ObjectPut(ObjectRecord),
    /// An object was removed.
    ObjectRemoved(String),
    /// The store metadata changed. Its `next_object_id` is the record's field, which may lag
    /// the counter (counter changes are not reported).
    MetaChanged(StoreMeta),
    /// The store metadata was deleted (the cluster's catalog was wiped).
    MetaRemoved,
    /// A key of the catalog changed to something that does not decode.
    Invalid {
        /// The key.
        key: String,
        /// Why it does not decode.
        error: CatalogError,
    },
}

/// The catalog's changes (see [`EtcdCatalog::watch`]).
#[derive(Debug)]
pub struct CatalogWatch {
    watch: Watch,
    prefix: String,
}

/// A read of the metadata and the counter, with the revisions that guard a write.
struct Snapshot {
    meta: Option<KeyValue>,
    /// The counter (the first id if the key does not exist).
    counter: u64,
    /// The counter key's mod revision, 0 if it does not exist.
    counter_revision: i64,
}

impl EtcdCatalog {
    /// The catalog under `prefix` (a `/` is appended if it does not end with one).
    pub fn new(client: Client, prefix: &str) -> Self {
        let prefix = dir(prefix);
        let location = PathBuf::from(format!("etcd:{prefix}"));
        Self { client, prefix, location }
    }

    /// The prefix, ending with `/`.
    #[must_use]
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The client.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The metadata and every object, read at one revision.
    pub fn list_with_revision(&self) -> Result<CatalogListing, CatalogError> {
        let all = self.client.get_prefix(self.prefix.as_bytes()).map_err(self.err("list"))?;
        let (mut meta, mut counter, mut objects) = (None, None, Vec::new());
        for kv in &all.kvs {
            match self.classify(&kv.key) {
                Key::Meta => meta = Some(StoreMeta::decode(&kv.value)?),
                Key::Counter => counter = Some(decode_counter(&kv.value)?),
                Key::Object(name) => objects.push(ObjectRecord::decode_stored(&name, &kv.value)?),
                Key::Invalid(e) => return Err(e),
                Key::Other => {}
            }
        }
        if let Some(m) = &mut meta {
            m.next_object_id = counter.unwrap_or(FIRST_OBJECT_ID).max(m.next_object_id);
        }
        Ok(CatalogListing { meta, objects, revision: all.revision })
    }

    /// The catalog's changes from `from_revision` (the listing's revision + 1).
    #[must_use]
    pub fn watch(&self, from_revision: i64) -> CatalogWatch {
        CatalogWatch {
            watch: self.client.watch_prefix(self.prefix.as_bytes(), from_revision),
            prefix: self.prefix.clone(),
        }
    }

    fn meta_key(&self) -> Vec<u8> {
        format!("{}meta", self.prefix).into_bytes()
    }

    fn counter_key(&self) -> Vec<u8> {
        format!("{}next_object_id", self.prefix).into_bytes()
    }

    fn object_key(&self, name: &str) -> Vec<u8> {
        format!("{}objects/{name}", self.prefix).into_bytes()
    }

    fn classify(&self, key: &[u8]) -> Key {
        classify(&self.prefix, key)
    }

    fn err(&self, op: &'static str) -> impl FnOnce(EtcdError) -> CatalogError + '_ {
        move |e| CatalogError::Backend { path: self.location.clone(), op, source: Box::new(e) }
    }

    /// The reads of a [`Snapshot`], as a transaction branch.
    fn snapshot_ops(&self) -> [TxnOp; 2] {
        [TxnOp::get(self.meta_key()), TxnOp::get(self.counter_key())]
    }

    fn read_snapshot(&self, op: &'static str) -> Result<Snapshot, CatalogError> {
        let r = self.client.txn(&[], &self.snapshot_ops(), &[]).map_err(self.err(op))?;
        snapshot(&r)
    }

    /// Writes the metadata that `make` builds from a snapshot, with the counter raised to its
    /// `next_object_id` if that is ahead; retries on conflict. With `guard_meta`, the write only
    /// happens if the metadata is still the one `make` saw.
    fn write_meta(
        &self,
        op: &'static str,
        guard_meta: bool,
        mut make: impl FnMut(&Snapshot) -> Result<StoreMeta, CatalogError>,
    ) -> Result<StoreMeta, CatalogError> {
        let mut snap = self.read_snapshot(op)?;
        for attempt in 0..MAX_ATTEMPTS {
            let mut meta = make(&snap)?;
            meta.next_object_id = meta.next_object_id.max(snap.counter);
            let mut compares = Vec::new();
            if guard_meta {
                let rev = snap.meta.as_ref().map_or(0, |kv| kv.mod_revision);
                compares.push(Compare::mod_revision(self.meta_key(), CompareOp::Equal, rev));
            }
            let mut ops = vec![TxnOp::put(self.meta_key(), meta.encode(), None)];
            if snap.counter_revision == 0 || meta.next_object_id > snap.counter {
                compares.push(Compare::mod_revision(
                    self.counter_key(),
                    CompareOp::Equal,
                    snap.counter_revision,
                ));
                ops.push(TxnOp::put(self.counter_key(), encode_counter(meta.next_object_id), None));
            }
            let r = self.client.txn(&compares, &ops, &self.snapshot_ops()).map_err(self.err(op))?;
            if r.succeeded {
                return Ok(meta);
            }
            snap = snapshot(&r)?;
            backoff(attempt);
        }
        Err(self.contended(op))
    }

    fn contended(&self, op: &'static str) -> CatalogError {
        CatalogError::Contended { path: self.location.clone(), op, attempts: MAX_ATTEMPTS }
    }
}

impl Catalog for EtcdCatalog {
    fn meta(&self) -> Result<StoreMeta, CatalogError> {
        let snap = self.read_snapshot("read meta")?;
        let kv = snap.meta.ok_or_else(|| CatalogError::NoMeta { path: self.location.clone() })?;
        let mut meta = StoreMeta::decode(&kv.value)?;
        meta.next_object_id = meta.next_object_id.max(snap.counter);
        Ok(meta)
    }

    fn put_meta(&self, meta: &StoreMeta) -> Result<(), CatalogError> {
        meta.validate()?;
        self.write_meta("put meta", false, |_| Ok(meta.clone())).map(drop)
    }

    fn create_meta(&self, meta: &StoreMeta) -> Result<(), CatalogError> {
        meta.validate()?;
        // Guarded on the metadata key's revision being 0: it does not exist.
        self.write_meta("create meta", true, |snap| match snap.meta {
            Some(_) => Err(CatalogError::AlreadyExists { path: self.location.clone() }),
            None => Ok(meta.clone()),
        })
        .map(drop)
    }

    fn update_meta(
        &self,
        f: &mut dyn FnMut(&mut StoreMeta) -> Result<(), CatalogError>,
    ) -> Result<StoreMeta, CatalogError> {
        self.write_meta("update meta", true, |snap| {
            let kv = snap
                .meta
                .as_ref()
                .ok_or_else(|| CatalogError::NoMeta { path: self.location.clone() })?;
            let mut meta = StoreMeta::decode(&kv.value)?;
            meta.next_object_id = meta.next_object_id.max(snap.counter);
            f(&mut meta)?;
            meta.validate()?;
            Ok(meta)
        })
    }

    fn object(&self, name: &str) -> Result<Option<ObjectRecord>, CatalogError> {
        if validate_name(name).is_err() {
            return Ok(None);
        }
        let kv = self.client.get(&self.object_key(name)).map_err(self.err("read object"))?;
        kv.map(|kv| ObjectRecord::decode_stored(name, &kv.value)).transpose()
    }

    fn objects(&self) -> Result<Vec<ObjectRecord>, CatalogError> {
        let prefix = self.object_key("");
        let all = self.client.get_prefix(&prefix).map_err(self.err("list objects"))?;
        all.kvs
            .iter()
            .map(|kv| match self.classify(&kv.key) {
                Key::Object(name) => ObjectRecord::decode_stored(&name, &kv.value),
                Key::Invalid(e) => Err(e),
                _ => Err(invalid_key(&kv.key, "not an object key".into())),
            })
            .collect()
    }

    fn insert_object(&self, rec: &ObjectRecord) -> Result<(), CatalogError> {
        rec.validate()?;
        let unallocated = || CatalogError::UnallocatedId { name: rec.name.clone(), id: rec.id };
        if rec.id.0 < FIRST_OBJECT_ID {
            return Err(unallocated());
        }
        let key = self.object_key(&rec.name);
        let r = self
            .client
            .txn(
                &[
                    Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                    Compare::value(
                        self.counter_key(),
                        CompareOp::Greater,
                        encode_counter(rec.id.0),
                    ),
                ],
                &[TxnOp::put(key.clone(), rec.encode(), None)],
                &[TxnOp::get(key)],
            )
            .map_err(self.err("insert object"))?;
        match (r.succeeded, r.responses.first().and_then(|g| g.first_kv())) {
            (true, _) => Ok(()),
            (false, Some(_)) => Err(CatalogError::NameExists { name: rec.name.clone() }),
            (false, None) => Err(unallocated()),
        }
    }

    fn grow_object(&self, rec: &ObjectRecord) -> Result<(), CatalogError> {
        rec.validate()?;
        let key = self.object_key(&rec.name);
        for _ in 0..MAX_ATTEMPTS {
            let Some(kv) = self.client.get(&key).map_err(self.err("read object"))? else {
                match self.insert_object(rec) {
                    // Inserted meanwhile by the same recording's earlier commit: read it again.
                    Err(CatalogError::NameExists { .. }) => continue,
                    other => return other,
                }
            };
            let old = ObjectRecord::decode_stored(&rec.name, &kv.value)?;
            if old.id != rec.id || old.blocks.len() > rec.blocks.len() {
                return Err(CatalogError::NameExists { name: rec.name.clone() });
            }
            let r = self
                .client
                .txn(
                    &[Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision)],
                    &[TxnOp::put(key.clone(), rec.encode(), None)],
                    &[],
                )
                .map_err(self.err("grow object"))?;
            if r.succeeded {
                return Ok(());
            }
        }
        Err(CatalogError::Invalid {
            what: format!("object {}", rec.name),
            reason: "changed by others while it grew".into(),
        })
    }

    fn allocate_object_id(&self) -> Result<ObjectId, CatalogError> {
        const OP: &str = "allocate object id";
        let mut snap = self.read_snapshot(OP)?;
        for attempt in 0..MAX_ATTEMPTS {
            let id = snap.counter;
            let next = id.checked_add(1).ok_or_else(|| CatalogError::Invalid {
                what: "object id counter".into(),
                reason: "exhausted".into(),
            })?;
            let key = self.counter_key();
            let r = self
                .client
                .txn(
                    &[Compare::mod_revision(key.clone(), CompareOp::Equal, snap.counter_revision)],
                    &[TxnOp::put(key, encode_counter(next), None)],
                    &self.snapshot_ops(),
                )
                .map_err(self.err(OP))?;
            if r.succeeded {
                return Ok(ObjectId(id));
            }
            snap = snapshot(&r)?;
            backoff(attempt);
        }
        Err(self.contended(OP))
    }

    fn remove_object(&self, name: &str) -> Result<Option<ObjectRecord>, CatalogError> {
        const OP: &str = "remove object";
        if validate_name(name).is_err() {
            return Ok(None);
        }
        let key = self.object_key(name);
        let mut current = self.client.get(&key).map_err(self.err(OP))?;
        for attempt in 0..MAX_ATTEMPTS {
            let Some(kv) = current else { return Ok(None) };
            // A record that does not decode is left in place.
            let rec = ObjectRecord::decode_stored(name, &kv.value)?;
            let r = self
                .client
                .txn(
                    &[Compare::mod_revision(key.clone(), CompareOp::Equal, kv.mod_revision)],
                    &[TxnOp::delete(key.clone())],
                    &[TxnOp::get(key.clone())],
                )
                .map_err(self.err(OP))?;
            if r.succeeded {
                return Ok(Some(rec));
            }
            current = r.responses.first().and_then(|g| g.first_kv()).cloned();
            backoff(attempt);
        }
        Err(self.contended(OP))
    }
}

impl CatalogWatch {
    /// The next batch of changes, waiting at most `timeout`: `Ok(None)` if none came in time.
    /// Batches of only non-catalog changes (the counter, membership keys) are skipped. Errors
    /// are the watch's ([`WatchError::Compacted`]: list again).
    pub fn next_batch(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<Vec<CatalogChange>>, WatchError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(batch) = self.watch.next_batch(left)? else { return Ok(None) };
            let changes = self.decode(batch);
            if !changes.is_empty() {
                return Ok(Some(changes));
            }
        }
    }

    /// A handle that cancels this watch from another thread.
    #[must_use]
    pub fn canceller(&self) -> WatchCanceller {
        self.watch.canceller()
    }

    /// Cancels the watch and waits for its thread.
    pub fn cancel(self) {
        self.watch.cancel();
    }

    fn decode(&self, batch: Vec<WatchEvent>) -> Vec<CatalogChange> {
        batch.into_iter().filter_map(|e| change(&self.prefix, e)).collect()
    }
}

impl Iterator for CatalogWatch {
    type Item = Result<Vec<CatalogChange>, WatchError>;

    /// Blocks for the next batch (skipping those of only non-catalog changes); `None` once the
    /// watch has ended.
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.watch.next()? {
                Ok(batch) => {
                    let changes = self.decode(batch);
                    if !changes.is_empty() {
                        return Some(Ok(changes));
                    }
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// What a key under the prefix is.
enum Key {
    Meta,
    Counter,
    Object(String),
    /// Under `P/objects/` but not a valid name.
    Invalid(CatalogError),
    /// Not the catalog's.
    Other,
}

fn classify(prefix: &str, key: &[u8]) -> Key {
    let Some(rest) = key.strip_prefix(prefix.as_bytes()) else { return Key::Other };
    match rest {
        b"meta" => Key::Meta,
        b"next_object_id" => Key::Counter,
        _ => match rest.strip_prefix(b"objects/") {
            None => Key::Other,
            Some(name) => match std::str::from_utf8(name) {
                Ok(name) if validate_name(name).is_ok() => Key::Object(name.to_owned()),
                _ => Key::Invalid(invalid_key(key, "not a valid object name".into())),
            },
        },
    }
}

/// The catalog change a watch event is, if the key is the catalog's (counter changes are not
/// reported).
fn change(prefix: &str, e: WatchEvent) -> Option<CatalogChange> {
    let key = e.key().to_vec();
    let decoded = match (classify(prefix, &key), e) {
        (Key::Other | Key::Counter, _) => return None,
        (Key::Invalid(error), _) => Err(error),
        (Key::Meta, WatchEvent::Put { value, .. }) => {
            StoreMeta::decode(&value).map(CatalogChange::MetaChanged)
        }
        (Key::Meta, WatchEvent::Delete { .. }) => Ok(CatalogChange::MetaRemoved),
        (Key::Object(name), WatchEvent::Put { value, .. }) => {
            ObjectRecord::decode_stored(&name, &value).map(CatalogChange::ObjectPut)
        }
        (Key::Object(name), WatchEvent::Delete { .. }) => Ok(CatalogChange::ObjectRemoved(name)),
    };
    Some(decoded.unwrap_or_else(|error| CatalogChange::Invalid {
        key: String::from_utf8_lossy(&key).into_owned(),
        error,
    }))
}

fn invalid_key(key: &[u8], reason: String) -> CatalogError {
    CatalogError::Invalid { what: format!("etcd key {:?}", String::from_utf8_lossy(key)), reason }
}

/// The metadata and counter read by [`EtcdCatalog::snapshot_ops`], from a transaction's answers.
fn snapshot(r: &TxnResponse) -> Result<Snapshot, CatalogError> {
    let meta = r.responses.first().and_then(|g| g.first_kv()).cloned();
    let (counter, counter_revision) = match r.responses.get(1).and_then(|g| g.first_kv()) {
        Some(kv) => (decode_counter(&kv.value)?, kv.mod_revision),
        None => (FIRST_OBJECT_ID, 0),
    };
    Ok(Snapshot { meta, counter, counter_revision })
}

fn encode_counter(next: u64) -> [u8; 8] {
    next.to_be_bytes()
}

fn decode_counter(bytes: &[u8]) -> Result<u64, CatalogError> {
    let bytes: [u8; 8] = bytes.try_into().map_err(|_| CatalogError::Invalid {
        what: "object id counter".into(),
        reason: format!("{} bytes instead of 8", bytes.len()),
    })?;
    Ok(u64::from_be_bytes(bytes).max(FIRST_OBJECT_ID))
}

/// A short pause after a conflict, growing with the attempt and jittered by the thread, so
/// that contending writers spread out.
fn backoff(attempt: u32) {
    use std::hash::{BuildHasher, RandomState};
    let jitter = RandomState::new().hash_one(attempt) % 1000;
    let micros = (u64::from(attempt.min(10)) * 500).saturating_add(jitter);
    std::thread::sleep(Duration::from_micros(micros));
}

/// `prefix` ending with `/`.
pub(crate) fn dir(prefix: &str) -> String {
    if prefix.ends_with('/') { prefix.to_owned() } else { format!("{prefix}/") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: Vec<u8>) -> WatchEvent {
        WatchEvent::Put { key: key.as_bytes().to_vec(), value, mod_revision: 5 }
    }

    fn del(key: &str) -> WatchEvent {
        WatchEvent::Delete { key: key.as_bytes().to_vec(), mod_revision: 6 }
    }

    #[test]
    fn keys_are_classified() {
        let p = "/isochron/c/";
        assert!(matches!(classify(p, b"/isochron/c/meta"), Key::Meta));
        assert!(matches!(classify(p, b"/isochron/c/next_object_id"), Key::Counter));
        assert!(matches!(classify(p, b"/isochron/c/objects/a.ts"), Key::Object(n) if n == "a.ts"));
        assert!(matches!(classify(p, b"/isochron/c/live/node-a"), Key::Other));
        assert!(matches!(classify(p, b"/isochron/d/meta"), Key::Other));
        assert!(matches!(classify(p, b"/isochron/c/metadata"), Key::Other));
        let Key::Invalid(e) = classify(p, b"/isochron/c/objects/a b") else { panic!() };
        assert!(e.to_string().contains("\"/isochron/c/objects/a b\""), "{e}");
        assert!(matches!(classify(p, b"/isochron/c/objects/\xff"), Key::Invalid(_)));
        assert_eq!(dir("/x"), "/x/");
        assert_eq!(dir("/x/"), "/x/");
    }

    #[test]
    fn watch_events_become_changes() {
        let p = "/c/";
        assert!(change(p, put("/c/live/a", vec![1])).is_none());
        assert!(change(p, put("/c/next_object_id", vec![0; 8])).is_none());
        assert!(matches!(change(p, del("/c/meta")), Some(CatalogChange::MetaRemoved)));
        assert!(matches!(
            change(p, del("/c/objects/x.ts")),
            Some(CatalogChange::ObjectRemoved(n)) if n == "x.ts"
        ));
        let Some(CatalogChange::Invalid { key, error }) =
            change(p, put("/c/objects/x.ts", vec![1, 2]))
        else {
            panic!("a record that does not decode is reported")
        };
        assert_eq!(key, "/c/objects/x.ts");
        assert!(error.to_string().contains("object \"x.ts\""), "{error}");
        let Some(CatalogChange::Invalid { key, .. }) = change(p, put("/c/meta", vec![])) else {
            panic!("metadata that does not decode is reported")
        };
        assert_eq!(key, "/c/meta");
    }

    #[test]
    fn counter_encoding_orders_bytewise() {
        let ids = [1u64, 2, 255, 256, 65_535, 1 << 40, u64::MAX];
        for w in ids.windows(2) {
            assert!(encode_counter(w[0]) < encode_counter(w[1]));
        }
        assert_eq!(decode_counter(&encode_counter(77)).unwrap(), 77);
        assert_eq!(decode_counter(&encode_counter(0)).unwrap(), FIRST_OBJECT_ID);
        let err = decode_counter(&[1, 2]).unwrap_err().to_string();
        assert!(err.contains("2 bytes instead of 8"), "{err}");
    }
}
