//! The differential property behind the `forward_request` and `forward_response` fuzz
//! targets (also run by `crates/splicer-wire/tests/differential.rs` in the normal suite):
//! a message that Splicer accepts is re-emitted exactly as the proxy forwards it (the head
//! rewritten by `splicer_wire::forward`, a chunked body through the `Reframer`), and the
//! forwarded bytes must parse, with an independent strict parser, to exactly one message
//! with the same method, target or status, and body.
//!
//! The independent parser: `httparse` for the head (with every line ending checked to be
//! CRLF), framing decided by RFC 9112 §6.3 from the raw fields, and a chunked decoder written
//! from RFC 9112 §7.1 that accepts only what the RFC's grammar allows.

// Each including target uses one half of this file.
#![allow(dead_code)]

use splicer_wire::chunked::{Reframer, Step};
use splicer_wire::forward;
use splicer_wire::http::{split_absolute, BodyLength, Limits, Method, RequestHead, ResponseHead};

/// What Splicer would do with the body starting at `rest`: the bytes it forwards after the
/// head and the body's content. `None` when Splicer would refuse it or wait for more.
fn splicer_body(framing: BodyLength, rest: &[u8], out: &mut Vec<u8>) -> Option<Vec<u8>> {
    match framing {
        BodyLength::None => Some(Vec::new()),
        BodyLength::Length(n) => {
            let n = usize::try_from(n).ok()?;
            let body = rest.get(..n)?.to_vec();
            out.extend_from_slice(&body);
            Some(body)
        }
        BodyLength::Close => {
            out.extend_from_slice(rest);
            Some(rest.to_vec())
        }
        BodyLength::Chunked => {
            let mut r = Reframer::new(4096, Limits::default());
            let mut at = 0;
            let mut body = Vec::new();
            loop {
                let (n, step) = r.advance(&rest[at..], out).ok()?;
                at += n;
                match step {
                    Step::More => return None,
                    Step::Data(k) => {
                        let k = usize::try_from(k).ok()?;
                        let data = rest.get(at..at + k)?;
                        out.extend_from_slice(data);
                        body.extend_from_slice(data);
                        at += k;
                    }
                    Step::Done => return Some(body),
                }
            }
        }
    }
}

/// Checks the property for a request (head and body) in `data`; panics when it fails.
pub fn check_request(data: &[u8]) {
    let Ok(Some((head, n))) = RequestHead::parse(data, &Limits::default()) else {
        return;
    };
    let Ok((authority, path)) = split_absolute(&head.target) else {
        return;
    };
    let method = head.method.as_str().to_string();
    let Ok(framing) = head.framing() else {
        return;
    };
    let fwd = forward::request(head, &framing, &authority, path.clone(), "splicer");
    let mut out = Vec::new();
    fwd.head.encode(&mut out);
    let Some(body) = splicer_body(fwd.body, &data[n..], &mut out) else {
        return;
    };
    let parsed = reference_request(&out).unwrap_or_else(|why| {
        panic!(
            "forwarded request does not parse strictly ({why}):\n{:?}",
            String::from_utf8_lossy(&out)
        )
    });
    assert_eq!(parsed.0, method, "method");
    assert_eq!(parsed.1, path, "target");
    assert_eq!(parsed.2, body, "body");
}

/// Checks the property for a response to a `GET` in `data`; panics when it fails.
pub fn check_response(data: &[u8]) {
    let Ok(Some((head, n))) = ResponseHead::parse(data, &Limits::default()) else {
        return;
    };
    if (100..200).contains(&head.status) {
        return; // interim responses are passed on before the final one, not framed
    }
    let status = head.status;
    let Ok(framing) = head.body(&Method::Get) else {
        return;
    };
    let Ok(back) = forward::response(head, framing, true, 1, "splicer") else {
        return;
    };
    let mut out = Vec::new();
    back.encode(&mut out);
    let Some(body) = splicer_body(framing, &data[n..], &mut out) else {
        return;
    };
    let parsed = reference_response(&out).unwrap_or_else(|why| {
        panic!(
            "forwarded response does not parse strictly ({why}):\n{:?}",
            String::from_utf8_lossy(&out)
        )
    });
    assert_eq!(parsed.0, status, "status");
    assert_eq!(parsed.1, body, "body");
}

type Fields = Vec<(String, Vec<u8>)>;

/// The head's length, after checking every line of it ends with CRLF.
fn strict_head_end(bytes: &[u8]) -> Result<usize, String> {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no CRLF CRLF")?
        + 4;
    for (i, &b) in bytes[..end].iter().enumerate() {
        if b == b'\n' && (i == 0 || bytes[i - 1] != b'\r') {
            return Err("bare LF in head".into());
        }
        if b == b'\r' && bytes.get(i + 1) != Some(&b'\n') {
            return Err("bare CR in head".into());
        }
    }
    Ok(end)
}

fn fields(raw: &[httparse::Header<'_>]) -> Fields {
    raw.iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect()
}

/// Parses one request strictly; it must be all of `bytes`. Returns method, target, body.
fn reference_request(bytes: &[u8]) -> Result<(String, String, Vec<u8>), String> {
    let end = strict_head_end(bytes)?;
    let mut raw = [httparse::EMPTY_HEADER; 512];
    let mut req = httparse::Request::new(&mut raw);
    match req.parse(&bytes[..end]).map_err(|e| e.to_string())? {
        httparse::Status::Complete(n) if n == end => {}
        _ => return Err("head does not end at CRLF CRLF".into()),
    }
    let (method, target) = (
        req.method.unwrap_or_default().to_string(),
        req.path.unwrap_or_default().to_string(),
    );
    let body = reference_body(&fields(req.headers), &bytes[end..], false)?;
    Ok((method, target, body))
}

/// Parses one response strictly; it must be all of `bytes`. Returns status and body.
fn reference_response(bytes: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let end = strict_head_end(bytes)?;
    let mut raw = [httparse::EMPTY_HEADER; 512];
    let mut resp = httparse::Response::new(&mut raw);
    match resp.parse(&bytes[..end]).map_err(|e| e.to_string())? {
        httparse::Status::Complete(n) if n == end => {}
        _ => return Err("head does not end at CRLF CRLF".into()),
    }
    let status = resp.code.unwrap_or_default();
    let f = fields(resp.headers);
    let body = if status == 204 || status == 304 {
        if end != bytes.len() {
            return Err("bytes after a bodiless response".into());
        }
        Vec::new()
    } else {
        reference_body(&f, &bytes[end..], true)?
    };
    Ok((status, body))
}

/// RFC 9112 §6.3 from the raw fields; `rest` must be exactly one body.
fn reference_body(f: &Fields, rest: &[u8], response: bool) -> Result<Vec<u8>, String> {
    let te: Vec<String> = f
        .iter()
        .filter(|(n, _)| n == "transfer-encoding")
        .flat_map(|(_, v)| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    let cl: Vec<&Vec<u8>> = f
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v)
        .collect();
    if !te.is_empty() {
        if !cl.is_empty() {
            return Err("Transfer-Encoding with Content-Length".into());
        }
        if te.iter().filter(|t| *t == "chunked").count() > 1 {
            return Err("chunked twice".into());
        }
        if te.last().map(String::as_str) == Some("chunked") {
            return strict_chunked(rest);
        }
        return if response {
            Ok(rest.to_vec())
        } else {
            Err("request coding not chunked".into())
        };
    }
    if let Some(first) = cl.first() {
        if cl.iter().any(|v| v != first) {
            return Err("differing Content-Length".into());
        }
        let s = std::str::from_utf8(first).map_err(|_| "Content-Length not text")?;
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err("Content-Length not digits".into());
        }
        let n: usize = s.parse().map_err(|_| "Content-Length too big")?;
        if rest.len() != n {
            return Err(format!("body of {} bytes, Content-Length {n}", rest.len()));
        }
        return Ok(rest.to_vec());
    }
    if response {
        Ok(rest.to_vec())
    } else if rest.is_empty() {
        Ok(Vec::new())
    } else {
        Err("bytes after a request without a body".into())
    }
}

/// A chunked body by RFC 9112 §7.1 (extensions allowed by the grammar, CRLF only); it must
/// be all of `s`.
fn strict_chunked(mut s: &[u8]) -> Result<Vec<u8>, String> {
    let line = |s: &[u8]| -> Result<(usize, usize), String> {
        let i = s
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("unterminated line")?;
        if s[..i]
            .iter()
            .any(|&b| b == b'\n' || b == b'\r' || (b < 0x20 && b != b'\t'))
        {
            return Err("control byte in a chunk line".into());
        }
        Ok((i, i + 2))
    };
    let mut body = Vec::new();
    loop {
        let (len, used) = line(s)?;
        let l = &s[..len];
        let hex = l.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        if hex == 0 || hex > 16 {
            return Err("chunk size".into());
        }
        let after = &l[hex..];
        if !(after.is_empty() || after[0] == b';') {
            return Err("junk after chunk size".into());
        }
        let size = u64::from_str_radix(std::str::from_utf8(&l[..hex]).unwrap(), 16)
            .map_err(|_| "chunk size")?;
        if size > i64::MAX as u64 {
            return Err("chunk size beyond 2^63".into());
        }
        s = &s[used..];
        if size == 0 {
            break;
        }
        let n = usize::try_from(size).map_err(|_| "huge chunk")?;
        body.extend_from_slice(s.get(..n).ok_or("short chunk")?);
        s = s[n..].strip_prefix(b"\r\n").ok_or("no CRLF after data")?;
    }
    loop {
        let (len, used) = line(s)?;
        if len == 0 {
            return if used == s.len() {
                Ok(body)
            } else {
                Err("bytes after the trailer section".into())
            };
        }
        let l = &s[..len];
        let colon = l
            .iter()
            .position(|&b| b == b':')
            .ok_or("trailer without colon")?;
        if colon == 0
            || !l[..colon]
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        {
            return Err("trailer name not a token".into());
        }
        let name = String::from_utf8_lossy(&l[..colon]).to_ascii_lowercase();
        if ["content-length", "transfer-encoding", "host", "trailer"].contains(&name.as_str()) {
            return Err(format!("trailer {name} forwarded"));
        }
        s = &s[used..];
    }
}
