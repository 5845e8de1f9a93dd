//! Batched UDP receive with `recvmmsg(2)`: one system call takes up to [`BATCH`] datagrams into
//! buffers allocated once, so an emulation client costs no allocation and few syscalls per
//! packet (DESIGN §2.10: the bench must be cheaper than the server it measures).
//!
//! Not here: readiness. The caller waits for the socket to be readable (tokio) and calls
//! [`RecvBatch::recv`] inside `try_io`, which turns `EAGAIN` into "not ready".

use std::io;
use std::os::fd::RawFd;

/// Datagrams taken per call.
pub const BATCH: usize = 32;
/// Largest datagram kept whole (an RTP packet of 7 TS packets is 1 328 bytes).
pub const SLOT_BYTES: usize = 2048;

/// Receive buffers for one socket.
#[derive(Debug)]
pub struct RecvBatch {
    bufs: Vec<u8>,
    lens: [usize; BATCH],
    count: usize,
}

impl Default for RecvBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl RecvBatch {
    /// Buffers for [`BATCH`] datagrams of up to [`SLOT_BYTES`] each.
    #[must_use]
    pub fn new() -> Self {
        Self { bufs: vec![0; BATCH * SLOT_BYTES], lens: [0; BATCH], count: 0 }
    }

    /// Receives up to [`BATCH`] datagrams without blocking; returns how many arrived
    /// (`WouldBlock` when none). Datagrams longer than [`SLOT_BYTES`] are truncated.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        // SAFETY: zeroed iovec and mmsghdr are valid (null pointers, zero lengths) and are
        // filled in below before use.
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdrs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for (i, (v, h)) in iov.iter_mut().zip(hdrs.iter_mut()).enumerate() {
            v.iov_base = self.bufs[i * SLOT_BYTES..].as_mut_ptr().cast();
            v.iov_len = SLOT_BYTES;
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: `hdrs` points at BATCH headers whose iovecs point into `self.bufs`, which
        // outlives the call; the kernel writes at most SLOT_BYTES into each.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                hdrs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            self.count = 0;
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        for (len, h) in self.lens.iter_mut().zip(&hdrs[..n]) {
            *len = (h.msg_len as usize).min(SLOT_BYTES);
        }
        self.count = n;
        Ok(n)
    }

    /// Datagram `i` of the last batch.
    #[must_use]
    pub fn packet(&self, i: usize) -> &[u8] {
        debug_assert!(i < self.count);
        &self.bufs[i * SLOT_BYTES..i * SLOT_BYTES + self.lens[i]]
    }

    /// The datagrams of the last batch.
    pub fn packets(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.count).map(|i| self.packet(i))
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    #[test]
    fn takes_several_datagrams_in_one_call() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut b = RecvBatch::new();
        assert_eq!(b.recv(rx.as_raw_fd()).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        for i in 0..5u8 {
            tx.send_to(&[i; 100], rx.local_addr().unwrap()).unwrap();
        }
        tx.send_to(&[9; 3000], rx.local_addr().unwrap()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(b.recv(rx.as_raw_fd()).unwrap(), 6);
        let got: Vec<(usize, u8)> = b.packets().map(|p| (p.len(), p[0])).collect();
        assert_eq!(got[..5], [(100, 0), (100, 1), (100, 2), (100, 3), (100, 4)]);
        assert_eq!(got[5], (SLOT_BYTES, 9), "truncated to the slot");
    }
}
