//! The file format of a disk-tier entry: a fixed preamble, the metadata (the key, what the
//! policy is made again from, the stored response head) with its CRC-32, then the body.
//!
//! ```text
//! "SPLCACHE" version:u32 meta_len:u32 body_len:u64 meta_crc:u32   (28 bytes)
//! meta: primary, host, received (ms since the epoch), status, reason,
//!       request fields, response fields
//! body
//! ```
//!
//! Strings are `u32` length + bytes, fields a `u32` count of (name, value) strings; all
//! little-endian. An entry is written whole to a temporary file and renamed into place, so
//! a file in the store is either complete or absent: [`decode`] still checks everything,
//! as a file may have been damaged or planted.

use std::time::{Duration, UNIX_EPOCH};

use splicer_wire::http::Headers;

use crate::policy::Basis;

const MAGIC: &[u8; 8] = b"SPLCACHE";
const VERSION: u32 = 1;
/// Bytes before the metadata.
pub const PREAMBLE: usize = 28;
/// The largest metadata read back (a stored head is bounded far below this).
pub const MAX_META: usize = 1 << 20;

/// What an entry holds besides its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub primary: String,
    pub basis: Basis,
    pub status: u16,
    pub reason: String,
    pub headers: Headers,
}

/// The preamble and metadata of an entry whose body is `body_len` bytes.
pub fn encode(meta: &Meta, body_len: u64) -> Vec<u8> {
    let mut m = Vec::with_capacity(1024);
    string(&mut m, meta.primary.as_bytes());
    string(&mut m, meta.basis.host.as_bytes());
    let ms = (meta.basis.received.duration_since(UNIX_EPOCH))
        .unwrap_or_default()
        .as_millis() as u64;
    m.extend_from_slice(&ms.to_le_bytes());
    m.extend_from_slice(&meta.status.to_le_bytes());
    string(&mut m, meta.reason.as_bytes());
    fields(&mut m, &meta.basis.request);
    fields(&mut m, &meta.headers);
    let mut out = Vec::with_capacity(PREAMBLE + m.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(m.len() as u32).to_le_bytes());
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&m).to_le_bytes());
    out.extend_from_slice(&m);
    out
}

fn string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s);
}

fn fields(out: &mut Vec<u8>, h: &Headers) {
    out.extend_from_slice(&(h.len() as u32).to_le_bytes());
    for f in h.iter() {
        string(out, f.name.as_bytes());
        string(out, f.value);
    }
}

/// The preamble's lengths: `(meta_len, body_len, meta_crc)`.
pub fn preamble(b: &[u8]) -> Result<(usize, u64, u32), &'static str> {
    if b.len() < PREAMBLE {
        return Err("shorter than an entry's preamble");
    }
    if &b[..8] != MAGIC {
        return Err("not a cache entry");
    }
    if u32::from_le_bytes(b[8..12].try_into().unwrap_or_default()) != VERSION {
        return Err("an entry of another version");
    }
    let meta_len = u32::from_le_bytes(b[12..16].try_into().unwrap_or_default()) as usize;
    if meta_len > MAX_META {
        return Err("metadata too long");
    }
    let body_len = u64::from_le_bytes(b[16..24].try_into().unwrap_or_default());
    let crc = u32::from_le_bytes(b[24..28].try_into().unwrap_or_default());
    Ok((meta_len, body_len, crc))
}

/// The metadata of an entry from its first bytes (at least the preamble and the metadata).
/// Returns it with the body's length.
pub fn decode(b: &[u8]) -> Result<(Meta, u64), &'static str> {
    let (meta_len, body_len, crc) = preamble(b)?;
    let m = b
        .get(PREAMBLE..PREAMBLE + meta_len)
        .ok_or("metadata cut short")?;
    if crc32fast::hash(m) != crc {
        return Err("metadata checksum mismatch");
    }
    let mut r = Reader(m);
    let primary = r.text()?;
    let host = r.text()?;
    let ms = u64::from_le_bytes(r.take(8)?.try_into().map_err(|_| "time")?);
    let status = u16::from_le_bytes(r.take(2)?.try_into().map_err(|_| "status")?);
    if !(100..=999).contains(&status) {
        return Err("status out of range");
    }
    let reason = r.text()?;
    let request = r.fields()?;
    let headers = r.fields()?;
    if !r.0.is_empty() {
        return Err("bytes after the metadata");
    }
    let received = UNIX_EPOCH
        .checked_add(Duration::from_millis(ms))
        .ok_or("time out of range")?;
    let basis = Basis {
        request,
        host,
        received,
    };
    let meta = Meta {
        primary,
        basis,
        status,
        reason,
        headers,
    };
    Ok((meta, body_len))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if self.0.len() < n {
            return Err("metadata cut short");
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    fn bytes(&mut self) -> Result<&'a [u8], &'static str> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| "length")?);
        self.take(n as usize)
    }

    fn text(&mut self) -> Result<String, &'static str> {
        let b = self.bytes()?;
        String::from_utf8(b.to_vec()).map_err(|_| "a string is not UTF-8")
    }

    fn fields(&mut self) -> Result<Headers, &'static str> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| "count")?);
        let mut h = Headers::default();
        for _ in 0..n {
            let name = self.text()?;
            if name.is_empty() || !name.bytes().all(is_token) {
                return Err("a field name is not a token");
            }
            let value = self.bytes()?;
            if value.iter().any(|&c| c == b'\r' || c == b'\n' || c == 0) {
                return Err("a field value has CR, LF or NUL");
            }
            h.push(&name, value);
        }
        Ok(h)
    }
}

fn is_token(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> Meta {
        let mut request = Headers::default();
        request.push("Accept-Encoding", "gzip");
        let mut headers = Headers::default();
        headers.push("Cache-Control", "max-age=60");
        headers.push("Vary", "Accept-Encoding");
        headers.push("X-Bin", vec![0xff, 0x80]);
        Meta {
            primary: "http://h:80/p".into(),
            basis: Basis {
                request,
                host: "h:80".into(),
                received: UNIX_EPOCH + Duration::from_millis(1_700_000_000_123),
            },
            status: 200,
            reason: "OK".into(),
            headers,
        }
    }

    #[test]
    fn round_trip() {
        let m = meta();
        let b = encode(&m, 12345);
        assert_eq!(decode(&b), Ok((m, 12345)));
    }

    #[test]
    fn any_damage_to_the_metadata_is_refused() {
        let b = encode(&meta(), 10);
        for i in 0..b.len() {
            if (16..24).contains(&i) {
                continue; // the body's length: checked against the file's size
            }
            let mut d = b.clone();
            d[i] ^= 0x41;
            assert!(decode(&d).is_err(), "byte {i} flipped and accepted");
        }
        for cut in 0..b.len() {
            assert!(decode(&b[..cut]).is_err(), "cut at {cut} accepted");
        }
    }
}
