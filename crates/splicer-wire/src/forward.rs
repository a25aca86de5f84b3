//! The heads a forward proxy sends on: the request head it writes upstream and the response
//! head it writes back to the client, from the heads it read. Pure functions, so every rule
//! (hop-by-hop fields, `Host`, `Via`, `Connection`, the framing guards) is unit-tested here
//! and the differential fuzz target checks exactly what the proxy forwards.
//!
//! The framing guards: a message is forwarded with the framing Splicer itself used and no
//! other (a chunked request loses its `Content-Length`; a transfer-coding list is written
//! anew from the validated list), so the next parser cannot frame it differently.

use std::net::IpAddr;

use crate::http::{
    self, Authority, BodyLength, Error, Framing, Headers, RequestHead, ResponseHead,
};

/// A request ready to go upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub head: RequestHead,
    /// How its body is framed (the same on both sides).
    pub body: BodyLength,
    /// The client asked for `100 Continue`; Splicer answers it itself, so the expectation is
    /// not forwarded.
    pub expects_continue: bool,
    /// The client wants its connection kept open after this exchange.
    pub client_keep: bool,
}

/// Rewrites an absolute-form request for the origin at `authority`: origin-form `path`,
/// `Host` from the target, hop-by-hop fields removed, the framing guards for `framing`
/// (`RequestHead::framing`, decided once by the caller), `Via: 1.x via`. An HTTP/1.0
/// client gets an HTTP/1.0 request upstream (so no chunked response it could not read),
/// with `Connection: keep-alive` so the upstream connection can be pooled.
pub fn request(
    head: RequestHead,
    framing: &Framing,
    authority: &Authority,
    path: String,
    via: &str,
) -> Request {
    host_parts(authority, |host| {
        rewrite(head, framing, host, path, via, |_| {})
    })
}

/// Rewrites a request a reverse proxy (the `edge`) received, for the origin it chose: as
/// [`request`], except that `Host` stays the one the client asked for (`host`, from its
/// `Host` field or an absolute-form target), and, with `client`, the client's address is
/// appended to `X-Forwarded-For` and `Forwarded` (RFC 7239; earlier hops' entries stay, the
/// last is this proxy's word) and `X-Forwarded-Proto` is set (a client's own is dropped: the
/// origin would believe it).
pub fn reverse_request(
    head: RequestHead,
    framing: &Framing,
    host: &str,
    path: String,
    via: &str,
    client: Option<IpAddr>,
) -> Request {
    rewrite(head, framing, &[host.as_bytes()], path, via, |headers| {
        if let Some(ip) = client {
            forwarded_fields(headers, ip, host);
        }
    })
}

/// The rewrite both kinds of proxy share; `host`: the `Host` value's parts back to back;
/// `more` adds fields before `Via`.
fn rewrite(
    mut head: RequestHead,
    framing: &Framing,
    host: &[&[u8]],
    path: String,
    via: &str,
    more: impl FnOnce(&mut Headers),
) -> Request {
    let Framing {
        body,
        codings,
        length,
    } = framing;
    let body = *body;
    let client_keep = head.keep_alive();
    let mut headers = std::mem::take(&mut head.headers);
    headers.remove_hop_by_hop();
    headers.remove("host");
    frame(&mut headers, body, codings.as_deref(), *length);
    headers.insert_parts(0, "Host", host);
    let expects_continue = headers.has_token("expect", "100-continue");
    if expects_continue {
        headers.remove("expect");
    }
    if head.version == 0 {
        headers.push("Connection", "keep-alive");
    }
    more(&mut headers);
    push_via(&mut headers, head.version, via);
    Request {
        head: RequestHead {
            method: head.method,
            target: path,
            version: head.version,
            headers,
        },
        body,
        expects_continue,
        client_keep,
    }
}

/// `X-Forwarded-For`, `Forwarded` and `X-Forwarded-Proto` for a request from `client`.
/// Written from parts, without strings of their own: formatting the entries was four
/// allocations per request at the edge.
fn forwarded_fields(headers: &mut Headers, client: IpAddr, host: &str) {
    let append = |headers: &mut Headers, name: &str, entry: &[&[u8]]| {
        // Most requests carry none: the entry is the whole field.
        if headers.get(name).is_none() {
            headers.push_parts(name, entry);
            return;
        }
        let mut all: Vec<Vec<u8>> = headers.get_all(name).map(<[u8]>::to_vec).collect();
        all.retain(|v| !v.iter().all(u8::is_ascii_whitespace));
        all.push(entry.concat());
        headers.remove(name);
        headers.push(name, all.join(&b", "[..]));
    };
    let mut text = AddressText::default();
    let ip = text.of(client);
    append(headers, "X-Forwarded-For", &[ip]);
    // RFC 7239 §6: an IPv6 address is bracketed and quoted; `host` is quoted (it may carry a
    // port) and only given when it is a plain authority, so no quote or backslash is in it.
    let (open, close): (&[u8], &[u8]) = match client {
        IpAddr::V4(_) => (b"for=", b""),
        IpAddr::V6(_) => (b"for=\"[", b"]\""),
    };
    let proto = b";proto=http";
    if !host.is_empty() && Authority::check(host, Some(80)).is_ok() {
        let entry = [open, ip, close, b";host=\"", host.as_bytes(), b"\"", proto];
        append(headers, "Forwarded", &entry);
    } else {
        append(headers, "Forwarded", &[open, ip, close, proto]);
    }
    headers.remove("x-forwarded-proto");
    headers.push("X-Forwarded-Proto", "http");
}

/// An address written out on the stack (the longest IPv6 text is 45 bytes).
struct AddressText {
    bytes: [u8; 48],
    len: usize,
}

impl Default for AddressText {
    fn default() -> AddressText {
        AddressText {
            bytes: [0; 48],
            len: 0,
        }
    }
}

impl AddressText {
    /// `ip` as `Display` writes it.
    fn of(&mut self, ip: IpAddr) -> &[u8] {
        use std::fmt::Write;
        self.len = 0;
        // Never fails: every address fits (`write_str` refuses only what would not).
        let _ = write!(self, "{ip}");
        &self.bytes[..self.len]
    }
}

impl std::fmt::Write for AddressText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        self.bytes
            .get_mut(self.len..end)
            .ok_or(std::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Rewrites a response for the client: HTTP/1.1, hop-by-hop fields removed, the framing
/// guards for `framing` (from [`ResponseHead::body`]), `Via` with the upstream's version,
/// `Connection: close` unless `keep`, `Connection: keep-alive` for a kept HTTP/1.0 client.
/// To an HTTP/1.0 client a chunked body goes de-chunked and ended by the close, so the
/// head loses its `Transfer-Encoding` (RFC 9112 §6.1: none in a response to a 1.0
/// request; the caller must not keep the connection); a coding other than the chunking
/// cannot be undone for it, and is refused.
pub fn response(
    mut resp: ResponseHead,
    framing: BodyLength,
    keep: bool,
    client_version: u8,
    via: &str,
) -> Result<ResponseHead, Error> {
    let upstream_version = resp.version;
    let mut codings = http::transfer_codings(resp.version, &resp.headers)?;
    if client_version == 0 && framing == BodyLength::Chunked {
        match codings.as_deref() {
            Some([c]) if c.eq_ignore_ascii_case("chunked") => codings = None,
            _ => {
                return Err(Error::BadTransferEncoding(
                    "a transfer coding an HTTP/1.0 client cannot decode",
                ))
            }
        }
    }
    let length = http::content_length(&resp.headers)?;
    resp.version = 1;
    resp.headers.remove_hop_by_hop();
    frame(&mut resp.headers, framing, codings.as_deref(), length);
    push_via(&mut resp.headers, upstream_version, via);
    if !keep {
        resp.headers.push("Connection", "close");
    } else if client_version == 0 {
        resp.headers.push("Connection", "keep-alive");
    }
    Ok(resp)
}

/// The framing guards: with a transfer coding, `Content-Length` goes (Transfer-Encoding wins,
/// RFC 9112 §6.3) and the coding list is written as one field in one spelling; without one,
/// agreeing `Content-Length` values (`5, 5`, or the field twice) become one field with one
/// value, which a strict parser after Splicer reads as Splicer did. A message without a body
/// to frame (a HEAD response, a 304) keeps its length, as it describes the representation.
fn frame(
    headers: &mut Headers,
    framing: BodyLength,
    codings: Option<&[String]>,
    length: Option<u64>,
) {
    // Written from the values parsed before the hop-by-hop removal: a `Connection` field
    // naming Content-Length must not strip the framing off a message with a body.
    headers.remove("content-length");
    headers.remove("transfer-encoding");
    // With a coding the length goes, except on a message without a body to frame.
    let keep_length = codings.is_none() || framing == BodyLength::None;
    if let Some(codings) = codings {
        headers.push("Transfer-Encoding", codings.join(", "));
    }
    if let Some(n) = length.filter(|_| keep_length) {
        headers.push_decimal("Content-Length", n);
    }
}

/// `Via: 1.x name` for a message of HTTP/1.`version` (0 or 1, all the parser accepts),
/// written straight into the fields: it is added to every message.
fn push_via(headers: &mut Headers, version: u8, via: &str) {
    let minor = [b'0' + version % 10];
    headers.push_parts("Via", &[b"1.", &minor, b" ", via.as_bytes()]);
}

/// `Host` for an authority: brackets around IPv6, the port unless it is 80.
pub fn host_header(a: &Authority) -> String {
    host_parts(a, |parts| {
        String::from_utf8_lossy(&parts.concat()).into_owned()
    })
}

/// [`host_header`]'s value as parts, given to `f`: written into a head per request
/// without a string of its own (building one was two allocations and a `realloc` per
/// request with a port).
fn host_parts<R>(a: &Authority, f: impl FnOnce(&[&[u8]]) -> R) -> R {
    let mut digits = [0u8; 20];
    let port = http::decimal(a.port.into(), &mut digits);
    let host = a.host.as_bytes();
    match (a.host.contains(':'), a.port == 80) {
        (true, true) => f(&[b"[", host, b"]"]),
        (true, false) => f(&[b"[", host, b"]:", port]),
        (false, true) => f(&[host]),
        (false, false) => f(&[host, b":", port]),
    }
}

#[cfg(test)]
mod tests;
