//! NFQUEUE batch verdicts. The `nfq` crate sends one netlink message per packet verdict;
//! at ~80,000 packets a second that syscall is the link emulator's main cost. A batch
//! verdict (`NFQNL_MSG_VERDICT_BATCH`) accepts every packet of the queue up to an id in one
//! message.

use std::io;
use std::os::fd::RawFd;

use crate::cvt_size;

const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_VERDICT_BATCH: u16 = libc::NFQNL_MSG_VERDICT_BATCH as u16;
const NFQA_VERDICT_HDR: u16 = libc::NFQA_VERDICT_HDR as u16;
const NF_ACCEPT: u32 = 1;

/// The netlink message accepting every packet of `queue` with an id up to `max_id`.
pub fn batch_accept_message(queue: u16, max_id: u32) -> [u8; 32] {
    let mut m = [0u8; 32];
    // nlmsghdr: length, type, flags (NLM_F_REQUEST), sequence, port id (native order).
    m[0..4].copy_from_slice(&32u32.to_ne_bytes());
    m[4..6].copy_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_VERDICT_BATCH).to_ne_bytes());
    m[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    // nfgenmsg: family AF_UNSPEC, version 0, queue number (big-endian).
    m[18..20].copy_from_slice(&queue.to_be_bytes());
    // nlattr NFQA_VERDICT_HDR: verdict and id, big-endian.
    m[20..22].copy_from_slice(&12u16.to_ne_bytes());
    m[22..24].copy_from_slice(&NFQA_VERDICT_HDR.to_ne_bytes());
    m[24..28].copy_from_slice(&NF_ACCEPT.to_be_bytes());
    m[28..32].copy_from_slice(&max_id.to_be_bytes());
    m
}

/// Accepts every packet of `queue` with an id up to `max_id`, on the NFQUEUE netlink socket
/// `fd` (descriptor number of a socket the `nfq` crate owns and does not lend). Memory-safe
/// for any number: it only sends 32 bytes of ours; a wrong number is an error or goes to
/// whatever that descriptor is, so pass only the queue's.
pub fn batch_accept(fd: RawFd, queue: u16, max_id: u32) -> io::Result<()> {
    let m = batch_accept_message(queue, max_id);
    // SAFETY: sends from a valid buffer of the given length; no pointer is kept.
    let n = cvt_size(unsafe { libc::send(fd, m.as_ptr().cast(), m.len(), 0) })?;
    if n != m.len() {
        return Err(io::Error::other("short netlink send"));
    }
    Ok(())
}

/// Sets the receive buffer of the NFQUEUE netlink socket `fd` (as [`batch_accept`], the
/// descriptor of the `nfq` crate's socket). A queued packet waits in that buffer until it
/// is read; when it is full the kernel drops the packet without a trace in the reader's
/// counters (`user_dropped` in /proc/net/netfilter/nfnetlink_queue). The default
/// (`net.core.rmem_default`, about 200 KiB) holds a few hundred packets: a burst of a fast
/// flow overflows it. Returns what the kernel reports.
pub fn set_receive_buffer(fd: RawFd, bytes: usize) -> io::Result<usize> {
    // SAFETY: the descriptor is only borrowed for the one setsockopt call below.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    crate::sock::set_receive_buffer(fd, bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn message_layout() {
        let m = super::batch_accept_message(7, 0x0102_0304);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()), 32);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 0x0303);
        assert_eq!(&m[18..20], &[0, 7]);
        assert_eq!(&m[24..32], &[0, 0, 0, 1, 1, 2, 3, 4]);
    }
}
