//! The SSL-handshake emulation of seed 000 (Rosu & Rosu, Table III): after CONNECT, client
//! and server exchange messages of exactly these sizes, in this order, before the GET.
//!
//! full:        client 98, server 2239, client 73, server 6, client 67, server 61
//! abbreviated: client 98, server 79, server 6, server 61, client 6, client 61
//!
//! The client's first message starts with 0x16 (a TLS handshake record's type), so the
//! origin tells it from an HTTP request, and its second byte says which variant follows:
//! `F` full, `A` abbreviated.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Who sends each message, and its size.
pub const FULL: [(Side, usize); 6] = [
    (Side::Client, 98),
    (Side::Server, 2239),
    (Side::Client, 73),
    (Side::Server, 6),
    (Side::Client, 67),
    (Side::Server, 61),
];
pub const ABBREVIATED: [(Side, usize); 6] = [
    (Side::Client, 98),
    (Side::Server, 79),
    (Side::Server, 6),
    (Side::Server, 61),
    (Side::Client, 6),
    (Side::Client, 61),
];

/// First byte of the client's first message.
pub const MARK: u8 = 0x16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

/// Runs the exchange as `me`; `first` holds bytes of the client's first message already
/// read by the server. Returns the sizes of the messages received, in order.
pub async fn exchange(
    s: &mut TcpStream,
    me: Side,
    full: bool,
    first: &[u8],
) -> std::io::Result<Vec<usize>> {
    let script = if full { FULL } else { ABBREVIATED };
    let mut got = Vec::new();
    for (i, (from, size)) in script.iter().enumerate() {
        if *from == me {
            let mut msg = vec![i as u8; *size];
            if i == 0 {
                msg[0] = MARK;
                msg[1] = if full { b'F' } else { b'A' };
            }
            s.write_all(&msg).await?;
        } else {
            let already = if i == 0 { first.len() } else { 0 };
            let mut rest = vec![0u8; size - already];
            s.read_exact(&mut rest).await?;
            got.push(*size);
        }
    }
    Ok(got)
}
