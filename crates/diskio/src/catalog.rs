//! The embedded catalog: [`Catalog`] on a redb database file.
//!
//! Why redb: a single-node store needs a crash-safe, transactional key-value file with no server
//! to run; redb is pure Rust, ACID with durable commits by default, and takes an exclusive file
//! lock, which doubles as the "one process per store" guard. A cluster uses etcd behind the same
//! trait.
//!
//! Tables:
//!
//! - `meta`: `"store"` → [`StoreMeta::encode`], `"next_object_id"` → the object-id counter
//!   (`u64` little-endian; authoritative: [`Catalog::meta`] reports it in
//!   [`StoreMeta::next_object_id`]).
//! - `objects`: object name → [`ObjectRecord::encode`]. redb keeps keys sorted, so listing is in
//!   name order.
//!
//! Every method is one redb transaction ([`Catalog::update_meta`] too: redb has one writer at a
//! time, so the read-modify-write never conflicts).

use std::error::Error as StdError;
use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};

use isochron_base::ObjectId;
use isochron_store::catalog::{Catalog, CatalogError, ObjectRecord, StoreMeta};
use redb::{Database, ReadableTable, TableDefinition};

const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");
const OBJECTS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("objects");
const META_STORE: &str = "store";
const META_NEXT_ID: &str = "next_object_id";
/// The first object id handed out; 0 is never used, so a zeroed block header matches no object.
const FIRST_OBJECT_ID: u64 = 1;

/// A [`Catalog`] in a redb database file (`catalog.redb` in a store).
#[derive(Debug)]
pub struct RedbCatalog {
    db: Database,
    path: PathBuf,
}

impl RedbCatalog {
    /// [`Catalog::insert_object`] (`grow` false: the name must be free) and
    /// [`Catalog::grow_object`] (`grow`: or hold a shorter record of the same id), in one
    /// transaction.
    fn put_object(&self, rec: &ObjectRecord, grow: bool) -> Result<(), CatalogError> {
        rec.validate()?;
        let txn = self.db.begin_write().map_err(self.err("begin transaction"))?;
        {
            let meta = txn.open_table(META).map_err(self.err("open table meta"))?;
            let next = read_counter(&meta, &self.path)?;
            if rec.id.0 < FIRST_OBJECT_ID || rec.id.0 >= next {
                return Err(CatalogError::UnallocatedId { name: rec.name.clone(), id: rec.id });
            }
            let mut objects = txn.open_table(OBJECTS).map_err(self.err("open table objects"))?;
            let taken = match objects.get(rec.name.as_str()).map_err(self.err("read object"))? {
                None => false,
                Some(_) if !grow => true,
                Some(v) => {
                    let old = ObjectRecord::decode_stored(&rec.name, v.value())?;
                    old.id != rec.id || old.blocks.len() > rec.blocks.len()
                }
            };
            if taken {
                return Err(CatalogError::NameExists { name: rec.name.clone() });
            }
            objects.insert(rec.name.as_str(), &*rec.encode()).map_err(self.err("write object"))?;
        }
        txn.commit().map_err(self.err("commit"))
    }

    /// Creates a new, empty catalog file at `path` (which must not exist). It has no store
    /// metadata until [`Catalog::put_meta`].
    pub fn create(path: &Path) -> Result<Self, CatalogError> {
        let file =
            OpenOptions::new().read(true).write(true).create_new(true).open(path).map_err(|e| {
                match e.kind() {
                    io::ErrorKind::AlreadyExists => {
                        CatalogError::AlreadyExists { path: path.into() }
                    }
                    _ => backend(path, "create")(e),
                }
            })?;
        let db = redb::Builder::new().create_file(file).map_err(db_err(path, "create"))?;
        let this = Self { db, path: path.to_owned() };
        let txn = this.db.begin_write().map_err(this.err("begin transaction"))?;
        txn.open_table(META).map_err(this.err("create table meta"))?;
        txn.open_table(OBJECTS).map_err(this.err("create table objects"))?;
        txn.commit().map_err(this.err("commit"))?;
        Ok(this)
    }

    /// Opens the existing catalog at `path`. Fails with [`CatalogError::Locked`] if another
    /// process (or another handle in this one) has it open.
    pub fn open(path: &Path) -> Result<Self, CatalogError> {
        if !path.exists() {
            return Err(CatalogError::Missing { path: path.to_owned() });
        }
        let db = Database::open(path).map_err(db_err(path, "open"))?;
        Ok(Self { db, path: path.to_owned() })
    }

    /// The database file.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store metadata with the authoritative counter in `next_object_id`.
    fn read_meta(
        &self,
        table: &impl ReadableTable<&'static str, &'static [u8]>,
    ) -> Result<StoreMeta, CatalogError> {
        let bytes = table
            .get(META_STORE)
            .map_err(self.err("read meta"))?
            .ok_or_else(|| CatalogError::NoMeta { path: self.path.clone() })?;
        let mut meta = StoreMeta::decode(bytes.value())?;
        meta.next_object_id = read_counter(table, &self.path)?.max(meta.next_object_id);
        Ok(meta)
    }

    /// Writes `meta` (validated by the caller) and the counter, never lowering the counter;
    /// returns what was written.
    fn write_meta(
        &self,
        table: &mut redb::Table<'_, &'static str, &'static [u8]>,
        mut meta: StoreMeta,
    ) -> Result<StoreMeta, CatalogError> {
        meta.next_object_id = read_counter(table, &self.path)?.max(meta.next_object_id);
        table.insert(META_STORE, &*meta.encode()).map_err(self.err("write meta"))?;
        table
            .insert(META_NEXT_ID, &meta.next_object_id.to_le_bytes()[..])
            .map_err(self.err("write object id counter"))?;
        Ok(meta)
    }

    fn err<'a, E: StdError + Send + Sync + 'static>(
        &'a self,
        op: &'static str,
    ) -> impl FnOnce(E) -> CatalogError + 'a {
        backend(&self.path, op)
    }
}

impl Catalog for RedbCatalog {
    fn meta(&self) -> Result<StoreMeta, CatalogError> {
        let txn = self.db.begin_read().map_err(self.err("begin transaction"))?;
        let table = txn.open_table(META).map_err(self.err("open table meta"))?;
        self.read_meta(&table)
    }

    fn put_meta(&self, meta: &StoreMeta) -> Result<(), CatalogError> {
        meta.validate()?;
        let txn = self.db.begin_write().map_err(self.err("begin transaction"))?;
        {
            let mut table = txn.open_table(META).map_err(self.err("open table meta"))?;
            self.write_meta(&mut table, meta.clone())?;
        }
        txn.commit().map_err(self.err("commit"))
    }

    fn update_meta(
        &self,
        f: &mut dyn FnMut(&mut StoreMeta) -> Result<(), CatalogError>,
    ) -> Result<StoreMeta, CatalogError> {
        let txn = self.db.begin_write().map_err(self.err("begin transaction"))?;
        let meta = {
            let mut table = txn.open_table(META).map_err(self.err("open table meta"))?;
            let mut meta = self.read_meta(&table)?;
            // An error drops the transaction: nothing is written.
            f(&mut meta)?;
            meta.validate()?;
            self.write_meta(&mut table, meta)?
        };
        txn.commit().map_err(self.err("commit"))?;
        Ok(meta)
    }

    fn object(&self, name: &str) -> Result<Option<ObjectRecord>, CatalogError> {
        let txn = self.db.begin_read().map_err(self.err("begin transaction"))?;
        let table = txn.open_table(OBJECTS).map_err(self.err("open table objects"))?;
        let Some(bytes) = table.get(name).map_err(self.err("read object"))? else {
            return Ok(None);
        };
        ObjectRecord::decode_stored(name, bytes.value()).map(Some)
    }

    fn objects(&self) -> Result<Vec<ObjectRecord>, CatalogError> {
        let txn = self.db.begin_read().map_err(self.err("begin transaction"))?;
        let table = txn.open_table(OBJECTS).map_err(self.err("open table objects"))?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(self.err("list objects"))? {
            let (name, bytes) = entry.map_err(self.err("list objects"))?;
            out.push(ObjectRecord::decode_stored(name.value(), bytes.value())?);
        }
        Ok(out)
    }

    fn insert_object(&self, rec: &ObjectRecord) -> Result<(), CatalogError> {
        self.put_object(rec, false)
    }

    fn grow_object(&self, rec: &ObjectRecord) -> Result<(), CatalogError> {
        self.put_object(rec, true)
    }

    fn allocate_object_id(&self) -> Result<ObjectId, CatalogError> {
        let txn = self.db.begin_write().map_err(self.err("begin transaction"))?;
        let id = {
            let mut table = txn.open_table(META).map_err(self.err("open table meta"))?;
            let id = read_counter(&table, &self.path)?;
            let next = id.checked_add(1).ok_or_else(|| CatalogError::Invalid {
                what: "object id counter".into(),
                reason: "exhausted".into(),
            })?;
            table
                .insert(META_NEXT_ID, &next.to_le_bytes()[..])
                .map_err(self.err("write object id counter"))?;
            id
        };
        txn.commit().map_err(self.err("commit"))?;
        Ok(ObjectId(id))
    }

    fn remove_object(&self, name: &str) -> Result<Option<ObjectRecord>, CatalogError> {
        let txn = self.db.begin_write().map_err(self.err("begin transaction"))?;
        let rec = {
            let mut table = txn.open_table(OBJECTS).map_err(self.err("open table objects"))?;
            let Some(bytes) = table.remove(name).map_err(self.err("remove object"))? else {
                return Ok(None);
            };
            // A record that does not decode is left in place (the transaction is dropped).
            ObjectRecord::decode_stored(name, bytes.value())?
        };
        txn.commit().map_err(self.err("commit"))?;
        Ok(Some(rec))
    }
}

/// The object-id counter from the `meta` table.
fn read_counter(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
    path: &Path,
) -> Result<u64, CatalogError> {
    let Some(v) = table.get(META_NEXT_ID).map_err(backend(path, "read object id counter"))? else {
        return Ok(FIRST_OBJECT_ID);
    };
    let bytes: [u8; 8] = v.value().try_into().map_err(|_| CatalogError::Invalid {
        what: "object id counter".into(),
        reason: format!("{} bytes instead of 8", v.value().len()),
    })?;
    Ok(u64::from_le_bytes(bytes).max(FIRST_OBJECT_ID))
}

fn backend<'a, E: StdError + Send + Sync + 'static>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(E) -> CatalogError + 'a {
    move |e| CatalogError::Backend { path: path.to_owned(), op, source: Box::new(e) }
}

/// Maps redb's open errors, turning its lock error into [`CatalogError::Locked`].
fn db_err<'a>(
    path: &'a Path,
    op: &'static str,
) -> impl FnOnce(redb::DatabaseError) -> CatalogError + 'a {
    move |e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => CatalogError::Locked { path: path.to_owned() },
        e => backend(path, op)(e),
    }
}

#[cfg(test)]
mod tests {
    use isochron_store::testing::{check_catalog, object_record};

    use super::*;

    /// The behaviour every catalog has, then what persists across a reopen.
    #[test]
    fn crud_and_persistence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.redb");
        {
            let cat = RedbCatalog::create(&path).unwrap();
            check_catalog(&cat);
        }
        assert!(matches!(RedbCatalog::create(&path), Err(CatalogError::AlreadyExists { .. })));
        let cat = RedbCatalog::open(&path).unwrap();
        assert_eq!(cat.path(), path);
        let names: Vec<String> = cat.objects().unwrap().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["zeta.ts"]);
        assert_eq!(cat.object("zeta.ts").unwrap(), Some(object_record(ObjectId(2), "zeta.ts")));
        assert_eq!(cat.meta().unwrap().disks[0].owner.as_deref(), Some("node-a"));
        assert_eq!(cat.allocate_object_id().unwrap(), ObjectId(10));
        drop(cat);
        let cat = RedbCatalog::open(&path).unwrap();
        assert_eq!(cat.meta().unwrap().next_object_id, 11);
    }

    #[test]
    fn locked_when_open_twice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("catalog.redb");
        let _first = RedbCatalog::create(&path).unwrap();
        let err = RedbCatalog::open(&path).unwrap_err();
        assert!(matches!(err, CatalogError::Locked { .. }), "{err}");
        assert!(err.to_string().contains("in use by another process"), "{err}");
    }

    #[test]
    fn missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = RedbCatalog::open(&dir.path().join("nope.redb")).unwrap_err();
        assert!(matches!(err, CatalogError::Missing { .. }), "{err}");
    }
}
