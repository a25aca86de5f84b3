//! HTTP/1 request and response heads (RFC 9112) on top of `httparse`, with size limits,
//! hop-by-hop header handling and message body framing.

use std::borrow::Cow;

use crate::Parsed;

mod headers;
mod method;
pub use headers::{decimal, write_decimal, Field, Headers};
pub use method::Method;

/// Errors from HTTP head parsing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The head is larger than the configured limit (maps to 431 or 502).
    #[error("header section larger than {0} bytes")]
    TooLarge(usize),
    #[error("more than {0} header fields")]
    TooManyHeaders(usize),
    #[error("malformed head: {0}")]
    Malformed(String),
    #[error("unsupported HTTP version")]
    Version,
    #[error("bad Content-Length")]
    ContentLength,
    #[error("Transfer-Encoding {0:?} not supported on a request")]
    TransferEncoding(String),
    /// A transfer-coding list no recipient can agree on: `identity`, `chunked` twice or not
    /// last on a request, a coding that is not a token, or any coding on HTTP/1.0.
    #[error("bad Transfer-Encoding: {0}")]
    BadTransferEncoding(&'static str),
    #[error("bad request target: {0}")]
    Target(&'static str),
}

/// Most header fields any head may have, whatever the limits say: the parser's field
/// table lives on the stack (8 KiB) instead of being allocated per head, and is left
/// uninitialised (`httparse` writes only the fields it finds): filling it with empty
/// fields was 8 KiB written per head, twice per exchange.
pub const MAX_HEADERS: usize = 256;

/// The parser's field table, not initialised.
fn field_table<'b>() -> [std::mem::MaybeUninit<httparse::Header<'b>>; MAX_HEADERS] {
    [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS]
}

/// Limits applied while parsing a head.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest head, request line and headers included, up to and including the blank line.
    pub max_head: usize,
    /// Most header fields (at most [`MAX_HEADERS`]).
    pub max_headers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        // Squid and HAProxy default to 64 KiB / 16 KiB; 32 KiB sits between them.
        Limits {
            max_head: 32 * 1024,
            max_headers: 100,
        }
    }
}

/// Fields and bytes a forwarded head gains (`Host`, `Via`, `Connection`, the forwarding
/// fields, `Cache-Status`): room for them from the start, since a table sized to the
/// parsed fields alone grew on the first field added, a `realloc` or two per message.
const ROOM_FOR_FIELDS: usize = 6;
const ROOM_FOR_BYTES: usize = 160;

/// The parser's fields, copied into one buffer sized for them and what a rewrite adds.
pub(crate) fn collect_headers(raw: &[httparse::Header<'_>]) -> Headers {
    collect_headers_into(raw, Headers::default())
}

/// As [`collect_headers`], into `table` (cleared first: an earlier head's table, so that a
/// connection's heads reuse one allocation instead of two each).
fn collect_headers_into(raw: &[httparse::Header<'_>], mut table: Headers) -> Headers {
    let bytes: usize = raw.iter().map(|h| h.name.len() + h.value.len()).sum();
    table.clear();
    table.reserve(raw.len() + ROOM_FOR_FIELDS, bytes + ROOM_FOR_BYTES);
    for h in raw {
        table.push(h.name, h.value);
    }
    table
}

fn map_httparse(e: httparse::Error, limits: &Limits) -> Error {
    match e {
        httparse::Error::TooManyHeaders => Error::TooManyHeaders(limits.max_headers),
        httparse::Error::Version => Error::Version,
        other => Error::Malformed(other.to_string()),
    }
}

fn finish<T>(
    status: httparse::Status<usize>,
    buf_len: usize,
    limits: &Limits,
    value: impl FnOnce() -> T,
) -> Result<Parsed<T>, Error> {
    match status {
        httparse::Status::Complete(n) if n > limits.max_head => {
            Err(Error::TooLarge(limits.max_head))
        }
        httparse::Status::Complete(n) => Ok(Some((value(), n))),
        httparse::Status::Partial if buf_len >= limits.max_head => {
            Err(Error::TooLarge(limits.max_head))
        }
        httparse::Status::Partial => Ok(None),
    }
}

/// A request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: Method,
    pub target: String,
    /// Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    pub headers: Headers,
}

impl RequestHead {
    pub fn parse(buf: &[u8], limits: &Limits) -> Result<Parsed<RequestHead>, Error> {
        Self::parse_reusing(buf, limits, &mut String::new(), &mut Headers::default())
    }

    /// As [`RequestHead::parse`], written into an earlier head's `target` and `table`
    /// (taken only when a head is complete, and cleared first: nothing of the earlier head
    /// stays): a kept-alive connection's requests allocate nothing for their heads.
    pub fn parse_reusing(
        buf: &[u8],
        limits: &Limits,
        target: &mut String,
        table: &mut Headers,
    ) -> Result<Parsed<RequestHead>, Error> {
        let mut raw = field_table();
        let mut req = httparse::Request::new(&mut []);
        let status = req
            .parse_with_uninit_headers(buf, &mut raw[..limits.max_headers.min(MAX_HEADERS)])
            .map_err(|e| map_httparse(e, limits))?;
        finish(status, buf.len(), limits, || RequestHead {
            method: Method::parse(req.method.unwrap_or_default()),
            target: {
                let mut t = std::mem::take(target);
                t.clear();
                t.push_str(req.path.unwrap_or_default());
                t
            },
            version: req.version.unwrap_or(1),
            headers: collect_headers_into(req.headers, std::mem::take(table)),
        })
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(
            self.method.as_str().len() + self.target.len() + 12 + self.headers.wire_len() + 2,
        );
        out.extend_from_slice(self.method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.");
        headers::write_decimal(out, self.version.into());
        out.extend_from_slice(b"\r\n");
        self.headers.encode(out);
    }
    /// Whether the connection may stay open after this exchange: the client wants it, and
    /// the request is not framed by `Transfer-Encoding` beside a `Content-Length`. Such a
    /// request is read by its chunked body, but whoever stood before Splicer may have framed
    /// it by its length: what follows is not surely the client's next request, and the
    /// server MUST close after responding (RFC 9112 §6.1).
    pub fn keep_alive(&self) -> bool {
        let ambiguous = self.headers.get("transfer-encoding").is_some()
            && self.headers.get("content-length").is_some();
        !ambiguous && keep_alive(self.version, &self.headers)
    }
    /// How the request body is framed (RFC 9112 §6.3, rules 4–6 for requests).
    pub fn body(&self) -> Result<BodyLength, Error> {
        self.framing().map(|f| f.body)
    }
    /// How the request body is framed, with what the framing was read from: a proxy
    /// decides it once per request and reads and forwards the body by it.
    pub fn framing(&self) -> Result<Framing, Error> {
        let codings = transfer_codings(self.version, &self.headers)?;
        // Checked even beside a coding: a malformed length is refused, not forwarded.
        let length = content_length(&self.headers)?;
        let body = match (&codings, length) {
            (Some(te), _) => {
                // A request whose final coding is not chunked cannot be framed: 400.
                let last = te.last().cloned().unwrap_or_default();
                if last != "chunked" {
                    return Err(Error::TransferEncoding(last));
                }
                BodyLength::Chunked
            }
            (None, Some(0) | None) => BodyLength::None,
            (None, Some(n)) => BodyLength::Length(n),
        };
        Ok(Framing {
            body,
            codings,
            length,
        })
    }
}

/// How a request's body is framed (RFC 9112 §6.3), and what that was decided from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Framing {
    /// How the body is read (and written on).
    pub body: BodyLength,
    /// The validated transfer codings (`transfer_codings`), written anew when forwarded.
    pub codings: Option<Vec<String>>,
    /// `Content-Length`, when one was given (and valid).
    pub length: Option<u64>,
}

/// A response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub version: u8,
    pub status: u16,
    /// As the origin wrote it; the usual phrases without a string of their own
    /// ([`reason_phrase`]).
    pub reason: Cow<'static, str>,
    pub headers: Headers,
}

/// Reason phrases most responses carry: kept as they are instead of copied per response.
const USUAL_REASONS: &[&str] = &[
    "OK",
    "Not Modified",
    "Partial Content",
    "No Content",
    "Not Found",
    "Found",
    "Moved Permanently",
    "",
];

/// A reason phrase as a response head holds it: one of the usual ones as it is, any other
/// copied.
pub fn reason_phrase(reason: &str) -> Cow<'static, str> {
    match USUAL_REASONS.iter().find(|r| **r == reason) {
        Some(usual) => Cow::Borrowed(usual),
        None => Cow::Owned(reason.to_string()),
    }
}

impl ResponseHead {
    pub fn new(status: u16, reason: &str) -> ResponseHead {
        ResponseHead {
            version: 1,
            status,
            reason: reason_phrase(reason),
            headers: Headers::default(),
        }
    }
    pub fn parse(buf: &[u8], limits: &Limits) -> Result<Parsed<ResponseHead>, Error> {
        Self::parse_reusing(buf, limits, &mut Headers::default())
    }

    /// As [`ResponseHead::parse`], its fields written into an earlier head's `table` (taken
    /// only when the head is complete, and cleared first).
    pub fn parse_reusing(
        buf: &[u8],
        limits: &Limits,
        table: &mut Headers,
    ) -> Result<Parsed<ResponseHead>, Error> {
        let mut raw = field_table();
        let mut resp = httparse::Response::new(&mut []);
        let status = httparse::ParserConfig::default()
            .parse_response_with_uninit_headers(
                &mut resp,
                buf,
                &mut raw[..limits.max_headers.min(MAX_HEADERS)],
            )
            .map_err(|e| map_httparse(e, limits))?;
        // Three digits parse, but `002` is not a status any parser after Splicer reads as 2.
        if resp.code.is_some_and(|c| c < 100) {
            return Err(Error::Malformed("status code below 100".into()));
        }
        finish(status, buf.len(), limits, || ResponseHead {
            version: resp.version.unwrap_or(1),
            status: resp.code.unwrap_or(0),
            reason: reason_phrase(resp.reason.unwrap_or_default()),
            headers: collect_headers_into(resp.headers, std::mem::take(table)),
        })
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.reason.len() + 15 + self.headers.wire_len() + 2);
        out.extend_from_slice(b"HTTP/1.");
        headers::write_decimal(out, self.version.into());
        out.push(b' ');
        headers::write_decimal(out, self.status.into());
        out.push(b' ');
        out.extend_from_slice(self.reason.as_bytes());
        out.extend_from_slice(b"\r\n");
        self.headers.encode(out);
    }
    pub fn keep_alive(&self) -> bool {
        keep_alive(self.version, &self.headers)
    }
    /// How the response body is framed (RFC 9112 §6.3), given the request method.
    pub fn body(&self, request_method: &Method) -> Result<BodyLength, Error> {
        if *request_method == Method::Head
            || (100..200).contains(&self.status)
            || self.status == 204
            || self.status == 304
        {
            return Ok(BodyLength::None);
        }
        if let Some(te) = transfer_codings(self.version, &self.headers)? {
            // A final coding other than chunked: the body runs to the close (RFC 9112 §6.3).
            return Ok(if te.last().is_some_and(|c| c == "chunked") {
                BodyLength::Chunked
            } else {
                BodyLength::Close
            });
        }
        match content_length(&self.headers)? {
            Some(0) => Ok(BodyLength::None),
            Some(n) => Ok(BodyLength::Length(n)),
            None => Ok(BodyLength::Close),
        }
    }
}

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLength {
    None,
    Length(u64),
    Chunked,
    /// Until the sender closes the connection (responses only).
    Close,
}

fn keep_alive(version: u8, headers: &Headers) -> bool {
    if headers.has_token("connection", "close") {
        return false;
    }
    version >= 1 || headers.has_token("connection", "keep-alive")
}

/// The transfer codings of a message, lower-cased, or `None` without `Transfer-Encoding`.
/// Refused (RFC 9112 §6.1, §7): any coding on HTTP/1.0 (its framing is faulty, whatever
/// follows), `identity` (no longer a coding), `chunked` more than once or anywhere but last
/// (a recipient could apply it twice or frame by it where we do not), a coding that is not a
/// token, or an empty list. Callers forward the list they got back, never the raw fields.
pub fn transfer_codings(version: u8, headers: &Headers) -> Result<Option<Vec<String>>, Error> {
    if headers.get("transfer-encoding").is_none() {
        return Ok(None);
    }
    if version == 0 {
        return Err(Error::BadTransferEncoding("Transfer-Encoding on HTTP/1.0"));
    }
    let codings = headers.tokens("transfer-encoding");
    if codings.is_empty() {
        return Err(Error::BadTransferEncoding("empty"));
    }
    if codings.iter().any(|c| !c.bytes().all(is_tchar)) {
        return Err(Error::BadTransferEncoding("a coding is not a token"));
    }
    if codings.iter().any(|c| c == "identity") {
        return Err(Error::BadTransferEncoding("identity"));
    }
    match codings.iter().position(|c| c == "chunked") {
        Some(i) if i + 1 != codings.len() => Err(Error::BadTransferEncoding(
            "chunked is not the final coding",
        )),
        _ if codings.iter().filter(|c| *c == "chunked").count() > 1 => {
            Err(Error::BadTransferEncoding("chunked applied twice"))
        }
        _ => Ok(Some(codings)),
    }
}

/// `tchar` (RFC 9110 §5.6.2): a byte of a token (a method, a field name, a coding, a
/// directive's name).
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// All Content-Length values must agree (RFC 9112 §6.3 rule 5); anything else is an error.
pub fn content_length(headers: &Headers) -> Result<Option<u64>, Error> {
    let mut found = None;
    for v in headers.get_all("content-length") {
        for part in v.split(|&b| b == b',') {
            let s = std::str::from_utf8(part)
                .map_err(|_| Error::ContentLength)?
                .trim();
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(Error::ContentLength);
            }
            let n: u64 = s.parse().map_err(|_| Error::ContentLength)?;
            if found.is_some_and(|f| f != n) {
                return Err(Error::ContentLength);
            }
            found = Some(n);
        }
    }
    Ok(found)
}

/// The authority of a request target: host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    /// Host name or IP literal, without IPv6 brackets.
    pub host: String,
    pub port: u16,
}

impl Authority {
    /// Parses `host:port`, `[v6]:port` or, with a default port, `host`.
    pub fn parse(s: &str, default_port: Option<u16>) -> Result<Authority, Error> {
        let (host, port) = Authority::check(s, default_port)?;
        Ok(Authority {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    /// What [`Authority::parse`] checks, without making one: the host as written and the
    /// port (for a `Host` field that is only validated, per request at the edge).
    pub fn check(s: &str, default_port: Option<u16>) -> Result<(&str, u16), Error> {
        if s.is_empty() || s.len() > 261 {
            return Err(Error::Target("empty or overlong authority"));
        }
        if s.contains('@') {
            return Err(Error::Target("userinfo in authority"));
        }
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (h, after) = rest
                .split_once(']')
                .ok_or(Error::Target("unclosed IPv6 literal"))?;
            h.parse::<std::net::Ipv6Addr>()
                .map_err(|_| Error::Target("bad IPv6 literal"))?;
            match after {
                "" => (h, None),
                p => (
                    h,
                    Some(
                        p.strip_prefix(':')
                            .ok_or(Error::Target("junk after IPv6 literal"))?,
                    ),
                ),
            }
        } else {
            // Outside brackets a host has no colon: `a:b:80` is refused, not resolved.
            let (h, p) = match s.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (s, None),
            };
            if !h
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
            {
                return Err(Error::Target("bad host"));
            }
            (h, p)
        };
        if host.is_empty() {
            return Err(Error::Target("bad host"));
        }
        let port = match port {
            Some(p) => parse_port(p).ok_or(Error::Target("bad port"))?,
            None => default_port.ok_or(Error::Target("missing port"))?,
        };
        Ok((host, port))
    }
}

/// A port in its one canonical spelling: 1 to 5 digits, no sign, no leading zero, 1–65535.
/// Every other spelling (`+80`, `080`, `0x50`) could name another port to another parser.
fn parse_port(p: &str) -> Option<u16> {
    let canonical =
        (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()) && !p.starts_with('0');
    canonical.then(|| p.parse().ok()).flatten()
}

impl std::fmt::Display for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Splits an absolute-form `http://authority/path?query` target into its authority and
/// origin-form path. Only the `http` scheme is forwarded; `https` arrives via CONNECT.
pub fn split_absolute(target: &str) -> Result<(Authority, String), Error> {
    let (authority, rest) = absolute_form(target)?;
    Ok((Authority::parse(authority, Some(80))?, origin_form(rest)))
}

/// An absolute-form `http` target's authority as written (not yet checked: give it to
/// [`Authority::parse`]) and what follows it (for [`origin_form`]). The forward proxy
/// looks at the authority before parsing it: a client that asks the same origin again
/// reuses what its last request parsed.
pub fn absolute_form(target: &str) -> Result<(&str, &str), Error> {
    let scheme_end = target
        .find("://")
        .ok_or(Error::Target("not absolute-form"))?;
    if !target[..scheme_end].eq_ignore_ascii_case("http") {
        return Err(Error::Target("scheme is not http"));
    }
    let rest = &target[scheme_end + 3..];
    let path_start = rest.find(['/', '?']).unwrap_or(rest.len());
    Ok(rest.split_at(path_start))
}

/// An absolute-form `target` made its origin-form path in place (no new string: the
/// forward proxy does it per request). `authority_end`: where the authority ends, as
/// [`absolute_form`] split it (`target.len() - rest.len()`).
pub fn into_origin_form(mut target: String, authority_end: usize) -> String {
    target.drain(..authority_end);
    if !target.starts_with('/') {
        // Empty, or a query alone: the room the scheme took holds the slash.
        target.insert(0, '/');
    }
    target
}

/// The origin-form path of what follows an absolute-form target's authority.
pub fn origin_form(rest: &str) -> String {
    // One rule for both: the in-place cut of a target whose authority is already gone.
    into_origin_form(rest.to_string(), 0)
}

#[cfg(test)]
mod tests;
