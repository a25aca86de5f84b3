//! Responses Splicer writes itself (errors, 407, 429), and the lingering close after them.

use std::os::fd::AsFd;
use std::time::Duration;

use splicer_wire::http::ResponseHead;

use super::client::Client;
use crate::access::Record;
use crate::error::Error;
use crate::upstream::ConnectError;

#[derive(PartialEq)]
pub(crate) enum Keep {
    Yes,
    No,
}

pub(crate) async fn connect_error(client: &mut Client, rec: &mut Record, e: ConnectError) {
    error(client, rec, e.http_status(), &Error::from(e)).await;
}

/// Sends an error response and closes the connection. Returns `false` (not kept).
pub(crate) async fn error(client: &mut Client, rec: &mut Record, status: u16, e: &Error) -> bool {
    reply(client, rec, status, Keep::No, e).await
}

/// Sends a short generated response; returns whether the connection stays open.
pub(crate) async fn reply(
    client: &mut Client,
    rec: &mut Record,
    status: u16,
    keep: Keep,
    why: &Error,
) -> bool {
    let bytes = generated(status, keep == Keep::No);
    rec.status = status;
    rec.bytes_down += bytes.len() as u64;
    if !rec.has_end() {
        rec.fail(why);
    }
    rec.emit();
    use tokio::io::AsyncWriteExt;
    let sent = tokio::time::timeout(Duration::from_secs(5), client.stream.write_all(&bytes)).await;
    if keep == Keep::Yes && matches!(sent, Ok(Ok(()))) {
        return true;
    }
    lingering_close(client).await;
    false
}

/// Half-closes, then reads and drops what the client still sends for a short while, so
/// that unread request bytes do not turn our close into a reset that destroys the response
/// before the client has read it (what Apache and nginx call lingering close).
async fn lingering_close(client: &mut Client) {
    let _ = splicer_sys::sock::shutdown_write(client.stream.as_fd());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut drained = 0usize;
    let mut scratch = vec![0u8; 16 * 1024];
    while drained < 1 << 20 {
        match tokio::time::timeout_at(deadline, client.stream.readable()).await {
            Ok(Ok(())) => match client.stream.try_read(&mut scratch) {
                Ok(0) => break,
                Ok(n) => drained += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            },
            _ => break,
        }
    }
}

/// The bytes of a short generated response (`close`: it ends the connection); the rings
/// send the same (`crate::ring`).
pub(crate) fn generated(status: u16, close: bool) -> Vec<u8> {
    let reason = reason(status);
    let body = format!("{status} {reason}\n");
    let mut head = ResponseHead::new(status, reason);
    head.headers.push("Content-Type", "text/plain");
    head.headers.push("Content-Length", body.len().to_string());
    if status == 407 {
        head.headers
            .push("Proxy-Authenticate", "Basic realm=\"splicer\"");
    }
    if status == 429 {
        // Failed logins from this address are being refused for a while (policy).
        head.headers.push("Retry-After", "60");
    }
    if close {
        head.headers.push("Connection", "close");
    }
    let mut bytes = Vec::with_capacity(256);
    head.encode(&mut bytes);
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        404 => "Not Found",
        400 => "Bad Request",
        403 => "Forbidden",
        407 => "Proxy Authentication Required",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// The response sent when the connection limit is reached.
pub fn overload_response() -> &'static [u8] {
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 24\r\nConnection: close\r\n\r\n503 Service Unavailable\n"
}
