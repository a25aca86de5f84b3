//! Chunked transfer coding (RFC 9112 §7.1).
//!
//! The relay never forwards chunk framing as it came: [`Reframer`] reads each chunk-size
//! line, chunk-data end and the trailer section strictly, and writes them anew in one
//! canonical spelling (`{size:x}\r\n`, no extensions, only trailer fields that may be
//! forwarded). Chunk data itself is not touched: the reframer tells its caller how many data
//! bytes come next ([`Step::Data`]) and the caller splices them, so data never has to cross
//! user space. Whatever the sender's spelling, every conforming parser after Splicer frames
//! the body exactly as Splicer did (no request smuggling through chunk extensions, bare LFs
//! or trailers).

use crate::http::{is_tchar, Headers, Limits, MAX_HEADERS};
use crate::Parsed;

/// Errors in chunked framing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("bad chunk size line")]
    BadSize,
    #[error("chunk size larger than 2^63-1")]
    Overflow,
    #[error("bad chunk extension")]
    BadExtension,
    #[error("chunk line longer than {0} bytes")]
    LineTooLong(usize),
    #[error("chunk data not followed by CRLF")]
    MissingCrlf,
    #[error("chunk line ended by a bare CR or LF")]
    BareLineEnd,
    #[error("malformed trailer section: {0}")]
    BadTrailer(String),
    #[error("trailer section larger than {0} bytes")]
    TrailerTooLarge(usize),
}

/// Largest chunk size accepted: what a signed 64-bit parser after Splicer can hold (nginx
/// and others keep sizes in `off_t`); a larger size would mean something else to them.
pub const MAX_CHUNK_SIZE: u64 = i64::MAX as u64;

/// Parses `HEX [BWS ; ext...] CRLF`; returns the chunk size and the length of the line.
/// Extensions must follow RFC 9112's grammar (they are checked, then dropped by
/// [`Reframer`]); a bare LF, a CR or any other control byte anywhere in the line is an error.
pub fn parse_size_line(buf: &[u8], max_line: usize) -> Result<Parsed<u64>, Error> {
    let Some((line, used)) = line(buf, max_line)? else {
        return Ok(None);
    };
    let hex_end = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    if hex_end == 0 {
        return Err(Error::BadSize);
    }
    let digits = &line[..hex_end];
    let significant = &digits[digits.iter().take_while(|&&b| b == b'0').count()..];
    if significant.len() > 16 {
        return Err(Error::Overflow);
    }
    let size = significant.iter().fold(0u64, |acc, &d| {
        (acc << 4) | u64::from((d as char).to_digit(16).unwrap_or(0))
    });
    if size > MAX_CHUNK_SIZE {
        return Err(Error::Overflow);
    }
    let rest = skip_ws(&line[hex_end..]);
    if rest.is_empty() {
        return Ok(Some((size, used)));
    }
    if rest[0] != b';' {
        return Err(Error::BadSize);
    }
    check_extensions(rest)?;
    Ok(Some((size, used)))
}

/// `*( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] )`, `ext` starting at ";".
fn check_extensions(mut ext: &[u8]) -> Result<(), Error> {
    while !ext.is_empty() {
        ext = skip_ws(ext);
        ext = ext.strip_prefix(b";").ok_or(Error::BadExtension)?;
        ext = skip_ws(ext);
        let name = token_len(ext);
        if name == 0 {
            return Err(Error::BadExtension);
        }
        ext = skip_ws(&ext[name..]);
        if let Some(v) = ext.strip_prefix(b"=") {
            let v = skip_ws(v);
            let n = match v.first() {
                Some(b'"') => quoted_len(v).ok_or(Error::BadExtension)?,
                _ => token_len(v),
            };
            if n == 0 {
                return Err(Error::BadExtension);
            }
            ext = skip_ws(&v[n..]);
        }
    }
    Ok(())
}

fn skip_ws(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    &s[n..]
}

fn token_len(s: &[u8]) -> usize {
    s.iter().take_while(|&&b| is_tchar(b)).count()
}

/// Length of a quoted-string at the start of `s` (RFC 9110 §5.6.4), quotes included.
fn quoted_len(s: &[u8]) -> Option<usize> {
    let text = |b: u8| b == b'\t' || b == b' ' || (0x21..=0x7e).contains(&b) || b >= 0x80;
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'"' => return Some(i + 1),
            b'\\' if s.get(i + 1).is_some_and(|&b| text(b)) => i += 2,
            b if text(b) && b != b'\\' => i += 1,
            _ => return None,
        }
    }
    None
}

/// Parses the CRLF that ends a chunk's data.
pub fn parse_data_end(buf: &[u8]) -> Result<Parsed<()>, Error> {
    match buf {
        [b'\r', b'\n', ..] => Ok(Some(((), 2))),
        [b'\r'] | [] => Ok(None),
        _ => Err(Error::MissingCrlf),
    }
}

/// Parses one trailer line after the last chunk; `true` when it was the final empty line.
/// Only for readers that discard trailers (test origins); the relay uses [`parse_trailers`].
pub fn parse_trailer_line(buf: &[u8], max_line: usize) -> Result<Parsed<bool>, Error> {
    Ok(line(buf, max_line)?.map(|(l, used)| (l.is_empty(), used)))
}

/// Parses the whole trailer section (after the last chunk's size line, up to and including
/// its empty line) with the same parser and limits as a head: field names are tokens, values
/// hold no control bytes, no obs-fold.
pub fn parse_trailers(buf: &[u8], limits: &Limits) -> Result<Parsed<Headers>, Error> {
    let mut raw = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let max = limits.max_headers.min(MAX_HEADERS);
    match httparse::parse_headers(buf, &mut raw[..max]) {
        Ok(httparse::Status::Complete((n, _))) if n > limits.max_head => {
            Err(Error::TrailerTooLarge(limits.max_head))
        }
        Ok(httparse::Status::Complete((n, fields))) => {
            Ok(Some((crate::http::collect_headers(fields), n)))
        }
        Ok(httparse::Status::Partial) if buf.len() >= limits.max_head => {
            Err(Error::TrailerTooLarge(limits.max_head))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(e) => Err(Error::BadTrailer(e.to_string())),
    }
}

/// Whether a trailer field may be passed on. Trailers cannot change how the message is
/// framed, routed, authenticated or interpreted (RFC 9110 §6.5.1), and hop-by-hop fields end
/// at Splicer; those are dropped, everything else well-formed goes through.
pub fn forwardable_trailer(name: &str) -> bool {
    const DROPPED: &[&str] = &[
        // framing and hop-by-hop
        "content-length",
        "transfer-encoding",
        "trailer",
        "te",
        "connection",
        "keep-alive",
        "proxy-connection",
        "upgrade",
        // routing and request modifiers
        "host",
        "max-forwards",
        "expect",
        "range",
        "if-match",
        "if-none-match",
        "if-modified-since",
        "if-unmodified-since",
        "if-range",
        // authentication and cookies
        "authorization",
        "proxy-authorization",
        "www-authenticate",
        "proxy-authenticate",
        "cookie",
        "set-cookie",
        // response control and content description
        "cache-control",
        "expires",
        "age",
        "date",
        "vary",
        "location",
        "retry-after",
        "content-type",
        "content-encoding",
        "content-range",
        "content-location",
    ];
    !DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d))
}

/// Finds a CRLF-terminated line; returns it without the CRLF and the bytes used. A CR not
/// followed by LF, or an LF alone, is an error as soon as it is seen: waiting for a CRLF
/// that a sender ending its lines with LF never sends held the connection until its idle
/// timeout, with no answer.
fn line(buf: &[u8], max_line: usize) -> Result<Parsed<&[u8]>, Error> {
    let window = &buf[..buf.len().min(max_line)];
    match window.iter().position(|&b| b == b'\r' || b == b'\n') {
        Some(i) if window[i] == b'\n' => Err(Error::BareLineEnd),
        Some(i) => match buf.get(i + 1) {
            Some(b'\n') => Ok(Some((&buf[..i], i + 2))),
            Some(_) => Err(Error::BareLineEnd),
            None => Ok(None),
        },
        None if buf.len() >= max_line => Err(Error::LineTooLong(max_line)),
        None => Ok(None),
    }
}

/// What the caller of [`Reframer::advance`] does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The framing read so far is handled; more bytes from the sender are needed.
    More,
    /// The next `n` bytes from the sender are chunk data: pass them on unchanged, then call
    /// `advance` again with what follows them.
    Data(u64),
    /// The body ended (last chunk and trailer section written).
    Done,
}

/// Where the reframer is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    DataEnd,
    Trailers,
    Done,
}

/// Reads a chunked body's framing and writes it anew (see the module comment). Sans I/O:
/// the caller feeds it the bytes it has and moves the chunk data itself.
#[derive(Debug, Clone)]
pub struct Reframer {
    state: State,
    max_line: usize,
    trailer_limits: Limits,
    /// Whether trailer fields are passed on at all (not to an HTTP/1.0 recipient, say).
    trailers: bool,
}

impl Reframer {
    /// `max_line` bounds a chunk-size line, `trailer_limits` the trailer section (the head
    /// limits).
    pub fn new(max_line: usize, trailer_limits: Limits) -> Reframer {
        Reframer {
            state: State::Size,
            max_line,
            trailer_limits,
            trailers: true,
        }
    }

    /// Drops every trailer field instead of forwarding the forwardable ones.
    pub fn without_trailers(mut self) -> Reframer {
        self.trailers = false;
        self
    }

    /// Whether the body has ended.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consumes framing from the start of `buf`, appending the canonical framing to `out`.
    /// Returns how many bytes of `buf` were used and what comes next. After an error the
    /// body cannot be framed: the connection must not be used for another message.
    pub fn advance(&mut self, buf: &[u8], out: &mut Vec<u8>) -> Result<(usize, Step), Error> {
        let mut used = 0;
        loop {
            let rest = &buf[used..];
            match self.state {
                State::Size => {
                    let Some((size, n)) = parse_size_line(rest, self.max_line)? else {
                        return Ok((used, Step::More));
                    };
                    used += n;
                    if size == 0 {
                        out.extend_from_slice(b"0\r\n");
                        self.state = State::Trailers;
                        continue;
                    }
                    out.extend_from_slice(format!("{size:x}\r\n").as_bytes());
                    self.state = State::DataEnd;
                    return Ok((used, Step::Data(size)));
                }
                State::DataEnd => {
                    let Some(((), n)) = parse_data_end(rest)? else {
                        return Ok((used, Step::More));
                    };
                    used += n;
                    out.extend_from_slice(b"\r\n");
                    self.state = State::Size;
                }
                State::Trailers => {
                    let Some((fields, n)) = parse_trailers(rest, &self.trailer_limits)? else {
                        return Ok((used, Step::More));
                    };
                    used += n;
                    if self.trailers {
                        for f in fields.iter().filter(|f| forwardable_trailer(f.name)) {
                            out.extend_from_slice(f.name.as_bytes());
                            out.extend_from_slice(b": ");
                            out.extend_from_slice(f.value);
                            out.extend_from_slice(b"\r\n");
                        }
                    }
                    out.extend_from_slice(b"\r\n");
                    self.state = State::Done;
                    return Ok((used, Step::Done));
                }
                State::Done => return Ok((used, Step::Done)),
            }
        }
    }
}

#[cfg(test)]
mod tests;
