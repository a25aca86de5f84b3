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

use crate::http::{Headers, Limits, MAX_HEADERS};
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

/// `tchar` (RFC 9110 §5.6.2).
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
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
        Ok(httparse::Status::Complete((n, fields))) => Ok(Some((
            Headers(
                fields
                    .iter()
                    .map(|h| crate::http::Header::new(h.name, h.value))
                    .collect(),
            ),
            n,
        ))),
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
/// followed by LF, or an LF alone, stays inside the line, where the callers reject it.
fn line(buf: &[u8], max_line: usize) -> Result<Parsed<&[u8]>, Error> {
    let window = &buf[..buf.len().min(max_line)];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some((&buf[..i], i + 2))),
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
                        for f in fields.0.iter().filter(|f| forwardable_trailer(&f.name)) {
                            out.extend_from_slice(f.name.as_bytes());
                            out.extend_from_slice(b": ");
                            out.extend_from_slice(&f.value);
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    const L: Limits = Limits {
        max_head: 1024,
        max_headers: 16,
    };

    #[test]
    fn size_lines() {
        assert_eq!(parse_size_line(b"1a\r\nxx", 64), Ok(Some((26, 4))));
        assert_eq!(parse_size_line(b"0;ext=1\r\n", 64), Ok(Some((0, 9))));
        assert_eq!(parse_size_line(b"FF ;e\r\n", 64), Ok(Some((255, 7))));
        assert_eq!(parse_size_line(b"5 \r\n", 64), Ok(Some((5, 4))));
        assert_eq!(
            parse_size_line(b"5 ; a = \"q \\\" d\" ;b\r\n", 64),
            Ok(Some((5, 21)))
        );
        assert_eq!(parse_size_line(b"1a", 64), Ok(None));
        assert_eq!(parse_size_line(b"\r\n", 64), Err(Error::BadSize));
        assert_eq!(parse_size_line(b"1g\r\n", 64), Err(Error::BadSize));
        assert_eq!(
            parse_size_line(b"11111111111111111\r\n", 64),
            Err(Error::Overflow)
        );
        assert_eq!(
            parse_size_line(b"000000000000000001\r\n", 64),
            Ok(Some((1, 20)))
        );
        assert_eq!(
            parse_size_line(&[b'1'; 100], 64),
            Err(Error::LineTooLong(64))
        );
        assert_eq!(parse_data_end(b"\r\n0"), Ok(Some(((), 2))));
        assert_eq!(parse_data_end(b"\r"), Ok(None));
        assert_eq!(parse_data_end(b"x\r\n"), Err(Error::MissingCrlf));
        assert_eq!(
            parse_trailer_line(b"A: b\r\n\r\n", 64),
            Ok(Some((false, 6)))
        );
        assert_eq!(parse_trailer_line(b"\r\n", 64), Ok(Some((true, 2))));
    }

    /// The malformed size lines the issue listed, each refused (the front end answers 400).
    #[test]
    fn malformed_size_lines_are_errors() {
        for bad in [
            &b"zz\r\n"[..],
            b"-1\r\n",
            b"0x5\r\n",
            b"+5\r\n",
            b" 5\r\n",
            b"5\n\r\n",
            b"5\nX\r\n",
            b"5;a\nb\r\n",
            b"5;a\x00\r\n",
            b"5;a\x01b\r\n",
            b"5;a\rb\r\n",
            b"5;\r\n",
            b"5;=x\r\n",
            b"5;a=\r\n",
            b"5;a b\r\n",
            b"5;a=\"open\r\n",
            b"5 x\r\n",
        ] {
            assert!(
                parse_size_line(bad, 64).is_err(),
                "{:?} accepted",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            parse_size_line(b"11111111111111111\r\n", 64),
            Err(Error::Overflow),
            "17 significant hex digits"
        );
        assert_eq!(
            parse_size_line(b"8000000000000000\r\n", 64),
            Err(Error::Overflow),
            "beyond a signed 64-bit size"
        );
        assert_eq!(
            parse_size_line(b"ffffffffffffffff\r\n", 64),
            Err(Error::Overflow)
        );
        assert_eq!(
            parse_size_line(b"7fffffffffffffff\r\n", 64),
            Ok(Some((MAX_CHUNK_SIZE, 18)))
        );
    }

    /// Runs a whole body held in one buffer through the reframer, passing data through.
    fn reframe(body: &[u8]) -> Result<(Vec<u8>, usize), Error> {
        let mut r = Reframer::new(256, L);
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            let (n, step) = r.advance(&body[at..], &mut out)?;
            at += n;
            match step {
                Step::More => return Err(Error::BadSize),
                Step::Data(k) => {
                    let k = k as usize;
                    out.extend_from_slice(&body[at..at + k]);
                    at += k;
                }
                Step::Done => return Ok((out, at)),
            }
        }
    }

    #[test]
    fn framing_is_written_anew() {
        let body = b"05;name=\"v\"\r\nhello\r\n6 ; x\r\n world\r\n000;y\r\nX-Sum: 1\r\n\r\nNEXT";
        let (out, used) = reframe(body).unwrap();
        assert_eq!(out, b"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 1\r\n\r\n");
        assert_eq!(
            &body[used..],
            b"NEXT",
            "the bytes after the body are left alone"
        );
    }

    /// The smuggling case of the issue: a bare LF ends the trailer section where the next
    /// parser would end it, and what follows is left unread for the front end to parse as
    /// a request of its own; nothing of it is written out.
    #[test]
    fn a_bare_lf_trailer_section_ends_where_every_parser_ends_it() {
        let body = b"5\r\nhello\r\n0\r\nX: a\n\nGET /SMUGGLED HTTP/1.1\nHost: internal.example\nX-Pad: y\r\n\r\n";
        let (out, used) = reframe(body).unwrap();
        assert_eq!(out, b"5\r\nhello\r\n0\r\nX: a\r\n\r\n");
        assert!(body[used..].starts_with(b"GET /SMUGGLED"));
    }

    #[test]
    fn malformed_trailers_are_errors() {
        for bad in [
            &b"0\r\nX: a\x00b\r\n\r\n"[..],
            b"0\r\nGET /x HTTP/1.1\r\n\r\n",
            b"0\r\n: v\r\n\r\n",
            b"0\r\nX a: v\r\n\r\n",
            b"0\r\nX: a\r\n folded\r\n\r\n",
            b"0\r\nX: a\rb\r\n\r\n",
        ] {
            assert!(
                matches!(reframe(bad), Err(Error::BadTrailer(_))),
                "{:?} → {:?}",
                String::from_utf8_lossy(bad),
                reframe(bad)
            );
        }
        let big = format!("0\r\nX: {}\r\n\r\n", "a".repeat(2000));
        assert_eq!(reframe(big.as_bytes()), Err(Error::TrailerTooLarge(1024)));
        let many: String = (0..20).map(|i| format!("T{i}: v\r\n")).collect();
        assert!(reframe(format!("0\r\n{many}\r\n").as_bytes()).is_err());
    }

    #[test]
    fn only_forwardable_trailers_go_through() {
        let (out, _) = reframe(
            b"0\r\nContent-Length: 5\r\nX-Checksum: abc\r\nTransfer-Encoding: chunked\r\n\
              Host: other.example\r\nSet-Cookie: a=b\r\nTrailer: X\r\nServer-Timing: db;dur=5\r\n\r\n",
        )
        .unwrap();
        assert_eq!(
            out,
            b"0\r\nX-Checksum: abc\r\nServer-Timing: db;dur=5\r\n\r\n".to_vec()
        );
        let mut r = Reframer::new(256, L).without_trailers();
        let mut out = Vec::new();
        let (_, step) = r
            .advance(b"0\r\nX-Checksum: abc\r\n\r\n", &mut out)
            .unwrap();
        assert_eq!((step, out.as_slice()), (Step::Done, &b"0\r\n\r\n"[..]));
    }

    #[test]
    fn chunk_data_must_end_with_crlf() {
        assert_eq!(
            reframe(b"5\r\nhelloX\r\n0\r\n\r\n"),
            Err(Error::MissingCrlf)
        );
        assert_eq!(reframe(b"5\r\nhello\n0\r\n\r\n"), Err(Error::MissingCrlf));
    }

    type Fields = Vec<(String, String)>;

    /// A strict decoder written from RFC 9112 §7.1 alone (no extensions, CRLF only), to check
    /// what the reframer writes.
    fn strict_decode(mut s: &[u8]) -> Option<(Vec<u8>, Fields)> {
        let mut body = Vec::new();
        loop {
            let eol = s.windows(2).position(|w| w == b"\r\n")?;
            let size = u64::from_str_radix(std::str::from_utf8(&s[..eol]).ok()?, 16).ok()?;
            s = &s[eol + 2..];
            if size == 0 {
                break;
            }
            let n = usize::try_from(size).ok()?;
            body.extend_from_slice(s.get(..n)?);
            s = s.get(n..)?.strip_prefix(b"\r\n")?;
        }
        let mut trailers = Vec::new();
        loop {
            let eol = s.windows(2).position(|w| w == b"\r\n")?;
            if eol == 0 {
                return (s.len() == 2).then_some((body, trailers));
            }
            let line = std::str::from_utf8(&s[..eol]).ok()?;
            let (k, v) = line.split_once(": ")?;
            trailers.push((k.to_string(), v.to_string()));
            s = &s[eol + 2..];
        }
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_size_line(&data, 64);
            let _ = parse_data_end(&data);
            let _ = parse_trailer_line(&data, 64);
            let _ = reframe(&data);
        }

        #[test]
        fn size_round_trip(n in 0..=MAX_CHUNK_SIZE) {
            let line = format!("{n:x}\r\n");
            prop_assert_eq!(parse_size_line(line.as_bytes(), 64), Ok(Some((n, line.len()))));
        }

        /// Any well-formed body, fed in any split, comes out as the same data and trailers
        /// in canonical framing.
        #[test]
        fn reframed_bodies_mean_the_same(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 0..6),
            ext in proptest::sample::select(vec!["", ";a", " ; a=b", ";x=\"y;z\"", "\t;k=v;l"]),
            zeros in 0usize..3,
            split in 1usize..17,
        ) {
            let mut wire = Vec::new();
            for c in &chunks {
                wire.extend_from_slice(format!("{}{:X}{ext}\r\n", "0".repeat(zeros), c.len()).as_bytes());
                wire.extend_from_slice(c);
                wire.extend_from_slice(b"\r\n");
            }
            wire.extend_from_slice(format!("0{ext}\r\nX-T: 1\r\n\r\n").as_bytes());
            // Fed `split` bytes at a time, as reads would deliver them.
            let mut r = Reframer::new(256, L);
            let (mut out, mut have, mut at) = (Vec::new(), Vec::new(), 0);
            let mut data_left = 0u64;
            while !r.is_done() {
                if data_left > 0 {
                    let k = (data_left as usize).min(wire.len() - at);
                    out.extend_from_slice(&wire[at..at + k]);
                    at += k;
                    data_left -= k as u64;
                    continue;
                }
                let (n, step) = r.advance(&have, &mut out).unwrap();
                have.drain(..n);
                match step {
                    Step::More => {
                        prop_assert!(at < wire.len(), "asked for more at the end");
                        let k = split.min(wire.len() - at);
                        have.extend_from_slice(&wire[at..at + k]);
                        at += k;
                    }
                    Step::Data(k) => {
                        let from_have = (k as usize).min(have.len());
                        out.extend(have.drain(..from_have));
                        data_left = k - from_have as u64;
                    }
                    Step::Done => {}
                }
            }
            let (body, trailers) = strict_decode(&out).expect("strictly decodable");
            prop_assert_eq!(body, chunks.concat());
            prop_assert_eq!(trailers, vec![("X-T".to_string(), "1".to_string())]);
        }
    }
}
