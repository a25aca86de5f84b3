//! The disk tier: objects in files, bounded in bytes, kept across restarts, served with
//! `sendfile(2)` from the file (the front end does the sending; this module finds and
//! opens the file).
//!
//! # Layout
//! `DIR/SPLICER-CACHE` marks the directory as Splicer's (a directory without it that is not
//! empty is refused, so a wrong path never has its files taken for damaged entries).
//! Objects are in `DIR/hh/PPPPPPPPPPPPPPPP/SSSSSSSSSSSSSSSS`: `P` the hash of the URI (its
//! variants share the directory, so an invalidation removes them all at once), `S` a
//! sequence number that orders writes across restarts; `hh` spreads the directories.
//! Files are written in `DIR/tmp`, synced, and renamed into place: a file in place is
//! whole, and `kill -9` at any moment leaves at most a temporary file, removed at the next
//! start ([`entry`] has the format).
//!
//! # Writes
//! One thread writes, from a queue bounded in jobs and in body bytes (a full queue drops
//! the write: the object is still in memory; `dropped` counts them). The byte bound keeps
//! objects the memory tier has evicted from piling up in the queue. The index is a [`Store`] of file-backed
//! objects: S3-FIFO as in memory, each weighed by its file's size; eviction unlinks.
//! Invalidations bump a stamp per URI hash under the lock the writer renames under, so a
//! write queued before an invalidation never lands after it.

pub mod entry;

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use splicer_wire::http::Headers;

use crate::object::{Body, FileBody, Object};
use crate::policy::Policy;
use crate::store::{self, Found, Store};
use entry::Meta;

/// Where the disk tier is and how large it may grow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskSettings {
    pub path: PathBuf,
    /// Bytes its files may take.
    pub size: u64,
    /// Bytes the index may hold in memory: the head of every object on disk, estimated as
    /// the memory tier weighs them. Past it, entries are evicted (their files removed) as
    /// past `size`.
    pub index_memory: u64,
}

/// Counters since start.
#[derive(Debug, Default)]
pub struct DiskCounters {
    /// Entries found whole at start.
    pub loaded: AtomicU64,
    /// Files found damaged at start (removed).
    pub rejected: AtomicU64,
    pub written: AtomicU64,
    pub write_errors: AtomicU64,
    /// Writes dropped because the queue was full.
    pub dropped: AtomicU64,
}

/// The disk tier. Dropping it stops the writer once its queue is empty.
#[derive(Debug)]
pub struct Disk {
    inner: Arc<Inner>,
    jobs: SyncSender<Job>,
    /// The directory's marker file, locked (`flock`) while this tier uses it: a second
    /// process given the same directory would remove and replace files under the first.
    _lock: fs::File,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    index: Store,
    heuristic: f32,
    /// Invalidations per URI hash bucket; the lock also orders renames against them.
    stamps: Mutex<Vec<u64>>,
    next: AtomicU64,
    /// Body bytes of the writes queued.
    queued: AtomicU64,
    counters: DiskCounters,
}

enum Job {
    Write {
        primary: String,
        object: Arc<Object>,
        stamp: u64,
    },
    Flush(SyncSender<()>),
}

const MARK: &str = "SPLICER-CACHE";
const STAMPS: usize = 4096;
const QUEUE: usize = 256;
/// Body bytes the queue may hold.
const QUEUE_BYTES: u64 = 64 << 20;

impl Disk {
    /// Opens (or creates) the tier at `settings.path` and loads its index: whole entries
    /// are kept (up to `size`, the rest evicted), damaged ones and leftover temporary
    /// files removed. `max_object`: the largest body taken.
    pub fn open(settings: &DiskSettings, max_object: u64, heuristic: f32) -> io::Result<Disk> {
        let dir = settings.path.clone();
        claim(&dir)?;
        let lock = fs::File::open(dir.join(MARK))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(io::Error::other(format!(
                    "{} is in use by another Splicer (its {MARK} file is locked): give each \
                     instance a directory of its own",
                    dir.display()
                )))
            }
            Err(fs::TryLockError::Error(e)) => return Err(e),
        }
        let tmp = dir.join("tmp");
        match fs::remove_dir_all(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        fs::create_dir_all(&tmp)?;
        let start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let inner = Arc::new(Inner {
            dir,
            index: Store::index(
                settings.size,
                max_object.min(settings.size / 4).max(1),
                settings.index_memory,
            ),
            heuristic,
            stamps: Mutex::new(vec![0; STAMPS]),
            next: AtomicU64::new(start),
            queued: AtomicU64::new(0),
            counters: DiskCounters::default(),
        });
        let last = inner.load(max_object)?;
        inner.next.fetch_max(last + 1, Ordering::Relaxed);
        let (jobs, rx) = sync_channel(QUEUE);
        let writer = inner.clone();
        std::thread::Builder::new()
            .name("cache-disk".into())
            .spawn(move || writer.run(rx))?;
        Ok(Disk {
            inner,
            jobs,
            _lock: lock,
        })
    }

    /// The object stored for `primary` that `request` selects, with its file open; `None`
    /// when there is none or its file is gone (the entry is forgotten then).
    pub fn get(&self, primary: &str, request: &Headers) -> Option<Found> {
        let mut found = self.inner.index.get(primary, request)?;
        let Body::File(f) = &found.object.body else {
            return None;
        };
        match File::open(&f.path) {
            Ok(file) => {
                found.file = Some(Arc::new(file));
                Some(found)
            }
            Err(_) => {
                self.inner.index.forget(&found.key, &found.object);
                None
            }
        }
    }

    /// Queues `object` (the response stored under `primary`) to be written. Its body may be
    /// in memory or in a file of this tier (a refreshed head). `false` when the queue is
    /// full, or the head is larger than the index takes (its file would be written and
    /// never indexed: an orphan outside the bound).
    pub fn put(&self, primary: &str, object: Arc<Object>) -> bool {
        if object.head_weight() > store::INDEX_HEAD {
            return false;
        }
        let stamp = self.inner.lock()[bucket(primary)];
        let bytes = object.body.len();
        let queued = self.inner.queued.fetch_add(bytes, Ordering::Relaxed);
        let job = Job::Write {
            primary: primary.to_string(),
            object,
            stamp,
        };
        let sent = match queued + bytes > QUEUE_BYTES && queued > 0 {
            true => false,
            false => self.jobs.try_send(job).is_ok(),
        };
        if !sent {
            self.inner.queued.fetch_sub(bytes, Ordering::Relaxed);
            self.inner.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// Forgets `primary` and its variants, files included, before returning. Returns
    /// whether something was stored.
    pub fn remove(&self, primary: &str) -> bool {
        let mut stamps = self.inner.lock();
        stamps[bucket(primary)] += 1;
        let had = self.inner.index.remove(primary);
        if let Err(e) = fs::remove_dir_all(self.inner.uri_dir(primary)) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(error = %e, "cache: cannot remove the files of an invalidated URI");
            }
        }
        had
    }

    /// Waits until every write queued so far is done.
    pub fn flush(&self) {
        let (tx, rx) = sync_channel(1);
        if self.jobs.send(Job::Flush(tx)).is_ok() {
            let _ = rx.recv();
        }
    }

    pub fn counters(&self) -> &DiskCounters {
        &self.inner.counters
    }

    /// Bytes its files take, as the index counts them.
    pub fn bytes(&self) -> u64 {
        self.inner.index.bytes()
    }

    /// Entries (and `Vary` markers) in the index.
    pub fn len(&self) -> usize {
        self.inner.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.inner.index.is_empty()
    }

    pub fn path(&self) -> &Path {
        &self.inner.dir
    }
}

/// Makes `dir` Splicer's, or checks that it is.
fn claim(dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let mark = dir.join(MARK);
    if mark.exists() {
        return Ok(());
    }
    if fs::read_dir(dir)?.next().is_some() {
        return Err(io::Error::other(format!(
            "{} is not empty and is not a Splicer cache directory (no {MARK} file): \
             give an empty or new directory",
            dir.display()
        )));
    }
    fs::write(
        &mark,
        "Splicer's disk cache: files here are removed and replaced by it.\n",
    )
}

/// FNV-1a, 64 bits: stable across builds, so files are found again after an upgrade.
fn hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn bucket(primary: &str) -> usize {
    (hash(primary) % STAMPS as u64) as usize
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        self.stamps.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn uri_dir(&self, primary: &str) -> PathBuf {
        let h = hash(primary);
        self.dir
            .join(format!("{:02x}", h >> 56))
            .join(format!("{h:016x}"))
    }

    fn run(&self, jobs: Receiver<Job>) {
        for job in jobs {
            match job {
                Job::Write {
                    primary,
                    object,
                    stamp,
                } => {
                    if let Err(e) = self.write(&primary, &object, stamp) {
                        self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(uri = %primary, error = %e, "cache: disk write failed");
                    }
                    self.queued.fetch_sub(object.body.len(), Ordering::Relaxed);
                }
                Job::Flush(done) => {
                    let _ = done.send(());
                }
            }
        }
    }

    /// Writes one entry: whole to a temporary file, synced, then renamed into place and
    /// indexed, unless its URI was invalidated since it was queued.
    fn write(&self, primary: &str, object: &Object, stamp: u64) -> io::Result<()> {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let basis = object.policy.basis().clone();
        let meta = Meta {
            primary: primary.to_string(),
            basis,
            status: object.status,
            reason: object.reason.clone(),
            headers: object.headers.clone(),
        };
        let len = object.body.len();
        let head = entry::encode(&meta, len);
        let tmp = self.dir.join("tmp").join(format!("{seq:016x}"));
        let written = (|| {
            let mut f = File::options().write(true).create_new(true).open(&tmp)?;
            f.write_all(&head)?;
            match &object.body {
                Body::Memory(b) => f.write_all(b)?,
                Body::File(from) => {
                    let mut src = File::open(&from.path)?;
                    src.seek(SeekFrom::Start(from.offset))?;
                    if io::copy(&mut src.take(len), &mut f)? != len {
                        return Err(io::Error::other(
                            "the stored file is shorter than its entry",
                        ));
                    }
                }
            }
            f.sync_data()
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        let dir = self.uri_dir(primary);
        let path = dir.join(format!("{seq:016x}"));
        let stamps = self.lock();
        if stamps[bucket(primary)] != stamp {
            drop(stamps);
            return fs::remove_file(&tmp);
        }
        fs::create_dir_all(&dir)?;
        fs::rename(&tmp, &path)?;
        let file_len = head.len() as u64 + len;
        let stored = Arc::new(Object {
            status: object.status,
            reason: object.reason.clone(),
            headers: object.headers.clone(),
            body: Body::File(Arc::new(FileBody {
                path,
                offset: head.len() as u64,
                len,
                file_len,
            })),
            policy: object.policy.clone(),
            hit_head: Default::default(),
        });
        self.index_entry(primary, stored);
        drop(stamps);
        self.counters.written.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Puts a file-backed object in the index; the files of what it displaced go.
    fn index_entry(&self, primary: &str, object: Arc<Object>) {
        let request = object.policy.basis().request.clone();
        match self.index.put(primary, &request, object.clone()) {
            Some(displaced) => {
                for d in displaced {
                    if !same_file(&d, &object) {
                        store::unlink(&d);
                    }
                }
            }
            None => store::unlink(&object),
        }
    }

    /// Indexes the whole entries found in the directory, oldest first (a newer response
    /// for a key displaces an older one); removes damaged ones. Returns the last sequence
    /// number seen.
    fn load(&self, max_object: u64) -> io::Result<u64> {
        let mut found = Vec::new();
        for hh in fs::read_dir(&self.dir)? {
            let hh = hh?;
            let name = hh.file_name();
            let name = name.to_string_lossy();
            if name.len() != 2
                || !hh.file_type()?.is_dir()
                || u8::from_str_radix(&name, 16).is_err()
            {
                continue;
            }
            for uri in fs::read_dir(hh.path())? {
                let uri = uri?;
                if !uri.file_type()?.is_dir() {
                    continue;
                }
                for file in fs::read_dir(uri.path())? {
                    let file = file?;
                    let path = file.path();
                    let seq = file
                        .file_name()
                        .to_str()
                        .and_then(|s| u64::from_str_radix(s, 16).ok());
                    let read = seq.ok_or("not an entry's name").and_then(|seq| {
                        read_entry(&path, max_object).map(|(meta, body_len, file_len)| {
                            (seq, path.clone(), meta, body_len, file_len)
                        })
                    });
                    match read {
                        Ok(e) if self.uri_dir(&e.2.primary) == uri.path() => found.push(e),
                        Ok(_) => self.reject(&path, "in another URI's directory"),
                        Err(why) => self.reject(&path, why),
                    }
                }
            }
        }
        found.sort_by_key(|e| e.0);
        let last = found.last().map_or(0, |e| e.0);
        for (_, path, meta, len, file_len) in found {
            let policy = Policy::again(&meta.basis, meta.status, &meta.headers, self.heuristic);
            let object = Arc::new(Object {
                status: meta.status,
                reason: meta.reason,
                headers: meta.headers,
                body: Body::File(Arc::new(FileBody {
                    path,
                    offset: file_len - len,
                    len,
                    file_len,
                })),
                policy,
                hit_head: Default::default(),
            });
            self.index_entry(&meta.primary, object);
            self.counters.loaded.fetch_add(1, Ordering::Relaxed);
        }
        Ok(last)
    }

    fn reject(&self, path: &Path, why: &str) {
        tracing::warn!(path = %path.display(), why, "cache: removing a damaged disk entry");
        self.counters.rejected.fetch_add(1, Ordering::Relaxed);
        let _ = fs::remove_file(path);
    }
}

fn same_file(a: &Object, b: &Object) -> bool {
    match (&a.body, &b.body) {
        (Body::File(x), Body::File(y)) => x.path == y.path,
        _ => false,
    }
}

/// An entry's metadata, body length and file length, when the file is whole.
fn read_entry(path: &Path, max_object: u64) -> Result<(Meta, u64, u64), &'static str> {
    let mut f = File::open(path).map_err(|_| "cannot be opened")?;
    let file_len = f.metadata().map_err(|_| "cannot be read")?.len();
    let mut pre = [0u8; entry::PREAMBLE];
    f.read_exact(&mut pre)
        .map_err(|_| "shorter than an entry's preamble")?;
    let (meta_len, body_len, _) = entry::preamble(&pre)?;
    if body_len > max_object {
        return Err("larger than max_object");
    }
    if file_len != (entry::PREAMBLE + meta_len) as u64 + body_len {
        return Err("its size is not the one its entry announces (torn or damaged)");
    }
    let mut all = pre.to_vec();
    all.resize(entry::PREAMBLE + meta_len, 0);
    f.read_exact(&mut all[entry::PREAMBLE..])
        .map_err(|_| "metadata cut short")?;
    let (meta, len) = entry::decode(&all)?;
    Ok((meta, len, file_len))
}

#[cfg(test)]
mod tests;
