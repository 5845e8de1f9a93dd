//! A heap buffer aligned for `O_DIRECT` (open(2)).
//!
//! Why: direct IO bypasses the page cache, so the kernel DMAs straight into the caller's memory,
//! which must then be aligned to the device's logical block size (we use 4096, which covers
//! 512-byte and 4K-native devices). `Vec<u8>` gives no alignment guarantee beyond 1, so blocks
//! are read into an [`AlignedBuf`]. It is the buffer that `isochron_store::Block` wraps and that
//! the block cache shares between sessions.
//!
//! Freed buffers are kept for reuse (up to [`POOL_BYTES`]): a fresh 1 MiB allocation costs an
//! `mmap`, 256 page faults, zeroing and an `munmap`, which on a virtual machine took longer than
//! the read itself (bench-disk read at a third of fio's rate on the same block files). A recycled
//! buffer's pages are mapped and its bytes initialised (with an older block's contents), so
//! [`AlignedBuf::for_read`] hands it out as is for the read to overwrite.

use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::Mutex;

/// The most bytes of freed buffers kept for reuse.
pub const POOL_BYTES: usize = 64 << 20;

/// Freed allocations (always initialised memory) and their total size.
struct Pool {
    free: Vec<(NonNull<u8>, Layout)>,
    bytes: usize,
}

// SAFETY: the pool owns the allocations it holds exclusively; they are plain memory.
unsafe impl Send for Pool {}

static POOL: Mutex<Pool> = Mutex::new(Pool { free: Vec::new(), bytes: 0 });

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

use isochron_store::block::BLOCK_ALIGN;

/// A zero-initialised byte buffer whose start is aligned to [`AlignedBuf::ALIGN`] and whose
/// allocation is a multiple of it.
pub struct AlignedBuf {
    /// Start of the allocation; dangling-free: always a live allocation of `layout`.
    ptr: NonNull<u8>,
    /// The visible length, `<= layout.size()`.
    len: usize,
    layout: Layout,
}

// SAFETY: `AlignedBuf` owns its allocation exclusively (like `Vec<u8>`); no interior mutability,
// so sending it or sharing `&AlignedBuf` across threads is as safe as for `Vec<u8>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; `&AlignedBuf` only gives `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// The alignment of every buffer: the O_DIRECT alignment, [`BLOCK_ALIGN`].
    pub const ALIGN: usize = BLOCK_ALIGN;

    /// A buffer of `len` zero bytes. The allocation is `len` rounded up to [`Self::ALIGN`] (at
    /// least one unit), so a direct read of the rounded length is always possible.
    ///
    /// # Panics
    ///
    /// If the rounded size overflows `isize` (like `Vec`), and aborts if memory runs out.
    #[must_use]
    pub fn zeroed(len: usize) -> Self {
        let size = len.max(1).next_multiple_of(Self::ALIGN);
        let layout = Layout::from_size_align(size, Self::ALIGN).expect("buffer size overflows");
        // SAFETY: `layout` has a non-zero size (at least `ALIGN`).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else { alloc::handle_alloc_error(layout) };
        Self { ptr, len, layout }
    }

    /// A buffer of `len` initialised bytes of unspecified value (a recycled buffer's old
    /// contents, or zeros), for a read to overwrite. Same allocation rule as [`Self::zeroed`].
    #[must_use]
    pub fn for_read(len: usize) -> Self {
        let size = len.max(1).next_multiple_of(Self::ALIGN);
        let layout = Layout::from_size_align(size, Self::ALIGN).expect("buffer size overflows");
        let reused = {
            let mut p = pool();
            let i = p.free.iter().position(|(_, l)| *l == layout);
            i.map(|i| {
                p.bytes -= layout.size();
                p.free.swap_remove(i).0
            })
        };
        match reused {
            Some(ptr) => Self { ptr, len, layout },
            None => Self::zeroed(len),
        }
    }

    /// A buffer holding a copy of `bytes`.
    #[must_use]
    pub fn copy_from(bytes: &[u8]) -> Self {
        let mut buf = Self::zeroed(bytes.len());
        buf.copy_from_slice(bytes);
        buf
    }

    /// The visible length.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the visible length is zero.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The allocated size (a multiple of [`Self::ALIGN`]); the most [`Self::set_len`] accepts.
    #[must_use]
    pub fn capacity(&self) -> usize {
        self.layout.size()
    }

    /// Shortens the visible length to `len`; does nothing if `len >= self.len()`.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Sets the visible length to `len`, up to [`Self::capacity`]. The bytes are always
    /// initialised (zeroed at allocation, or whatever was written since).
    ///
    /// # Panics
    ///
    /// If `len > self.capacity()`.
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.capacity(), "length {len} beyond capacity {}", self.capacity());
        self.len = len;
    }

    /// The whole allocation, beyond the visible length, for direct reads of aligned lengths.
    pub fn spare_mut(&mut self) -> &mut [u8] {
        // SAFETY: the allocation is `layout.size()` bytes, initialised (zeroed at allocation),
        // and exclusively borrowed through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `len <= layout.size()`; the bytes are initialised; the borrow of `self` keeps
        // the allocation alive and unaliased by `&mut`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`, with exclusive access through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl AsMut<[u8]> for AlignedBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        Self::copy_from(self)
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        {
            let mut p = pool();
            if p.bytes + self.layout.size() <= POOL_BYTES {
                p.bytes += self.layout.size();
                p.free.push((self.ptr, self.layout));
                return;
            }
        }
        // SAFETY: `ptr` was returned by `alloc_zeroed(self.layout)`; this buffer owned it and is
        // going away without handing it to the pool, so it is freed exactly once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for AlignedBuf {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_resizable() {
        for len in [0, 1, 4095, 4096, 4097, 1 << 20] {
            let mut b = AlignedBuf::zeroed(len);
            assert_eq!(b.as_ptr() as usize % AlignedBuf::ALIGN, 0);
            assert_eq!(b.len(), len);
            assert_eq!(b.capacity() % AlignedBuf::ALIGN, 0);
            assert!(b.capacity() >= len.max(1));
            assert!(b.iter().all(|&x| x == 0));
            b.set_len(b.capacity());
            b[0] = 7;
            b.truncate(1);
            assert_eq!(&b[..], &[7]);
            b.truncate(100);
            assert_eq!(b.len(), 1);
            assert_eq!(b.spare_mut().len(), b.capacity());
        }
        let c = AlignedBuf::copy_from(b"hello");
        assert_eq!(&c[..], b"hello");
        assert_eq!(c.clone(), c);
        assert!(AlignedBuf::zeroed(0).is_empty());
    }

    #[test]
    fn freed_buffers_are_reused_for_reads() {
        let size = 3 * AlignedBuf::ALIGN + 4096 * 7; // a size no other test uses
        let mut a = AlignedBuf::zeroed(size);
        a[0] = 42;
        let ptr = a.as_ptr();
        drop(a);
        let b = AlignedBuf::for_read(size - 10);
        assert_eq!(b.as_ptr(), ptr, "the freed allocation is handed out again");
        assert_eq!(b.len(), size - 10);
        assert_eq!(b[0], 42, "contents are not cleared (the read overwrites them)");
        assert_eq!(b.as_ptr() as usize % AlignedBuf::ALIGN, 0);
        // `zeroed` still zeroes.
        drop(b);
        assert!(AlignedBuf::zeroed(size).iter().all(|&x| x == 0));
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<AlignedBuf>();
        check::<std::sync::Arc<isochron_store::Block<AlignedBuf>>>();
    }
}
