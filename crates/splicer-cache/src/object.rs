//! A stored response, and what it answers to one request: the whole of it, its head
//! (`HEAD`), a `304` to a conditional request, or one byte range (`206`, `416`).

use bytes::Bytes;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use splicer_wire::http::{Headers, ResponseHead};

use crate::policy::Policy;

mod hit_head;
pub use hit_head::{HitHead, HitHeadSlot};

/// A response held by the cache: its head as stored and its whole body.
#[derive(Debug, Clone)]
pub struct Object {
    pub status: u16,
    pub reason: String,
    /// The fields as stored: without hop-by-hop fields and without framing (a stored body
    /// is always served with `Content-Length`).
    pub headers: Headers,
    pub body: Body,
    pub policy: Policy,
    /// A plain hit's head as bytes, made by the front end at the first such hit.
    pub hit_head: HitHeadSlot,
}

/// Where a stored body is.
#[derive(Debug, Clone)]
pub enum Body {
    /// In the memory tier.
    Memory(Bytes),
    /// In a file of the disk tier: served from there with `sendfile(2)`.
    File(Arc<FileBody>),
}

/// A body in a disk-tier file.
#[derive(Debug)]
pub struct FileBody {
    pub path: PathBuf,
    /// Where the body starts in the file (after the entry's own head).
    pub offset: u64,
    pub len: u64,
    /// The whole file's size: what it weighs in the disk tier.
    pub file_len: u64,
}

impl Body {
    pub fn len(&self) -> u64 {
        match self {
            Body::Memory(b) => b.len() as u64,
            Body::File(f) => f.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes, when they are in memory.
    pub fn bytes(&self) -> Option<&Bytes> {
        match self {
            Body::Memory(b) => Some(b),
            Body::File(_) => None,
        }
    }
}

/// Bytes counted per object beyond its head and body (the entry, the policy's maps).
const OVERHEAD: usize = 512;

impl Object {
    /// The fields to store from a response's fields.
    pub fn stored_fields(mut fields: Headers) -> Headers {
        fields.remove_hop_by_hop();
        fields.remove("transfer-encoding");
        fields.remove("content-length");
        // Kept for the object's life and weighed by its fields: without the removed ones'
        // bytes.
        fields.shrink_to_fit();
        fields
    }

    /// What it weighs in its tier: in memory, head, body and bookkeeping; on disk, its
    /// file.
    pub fn weight(&self) -> u64 {
        match &self.body {
            Body::Memory(b) => b.len() as u64 + self.head_weight(),
            Body::File(f) => f.file_len,
        }
    }

    /// What its head and bookkeeping weigh in memory (all of a disk object's that is held
    /// in memory, in the disk tier's index).
    pub fn head_weight(&self) -> u64 {
        let head = self.headers.wire_len();
        // The policy keeps its own copies of the request and response fields, and a hit
        // its head as bytes (the fields, a status line and three more fields).
        (3 * head + self.policy.request_bytes() + 2 * self.reason.len() + OVERHEAD) as u64
    }

    /// What to send to a request (method and fields) that this object answers, at `now`:
    /// the head without `Via`, `Connection` or `Cache-Status` (the front end adds them) and
    /// the part of the body that follows it.
    pub fn answer(&self, method: &str, request: &Headers, now: SystemTime) -> Served {
        let get_or_head = method == "GET" || method == "HEAD";
        let age = self.policy.age(now).as_secs();
        if get_or_head && self.not_modified_for(request) {
            let mut head = ResponseHead::new(304, "Not Modified");
            for name in [
                "cache-control",
                "content-location",
                "date",
                "etag",
                "expires",
                "vary",
            ] {
                for v in self.headers.get_all(name) {
                    head.headers.push(canonical(name), v);
                }
            }
            head.headers.push_decimal("Age", age);
            return Served { head, body: 0..0 };
        }
        let len = self.body.len() as usize;
        let mut head = ResponseHead::new(self.status, &self.reason);
        head.headers = self.headers.clone();
        head.headers.remove("age");
        head.headers.push_decimal("Age", age);
        let mut body = 0..len;
        if method == "GET" && self.status == 200 && self.range_applies(request) {
            // Several ranges or a form not understood: the whole (RFC 9110 §14.2).
            if let Some(Some(Spec::Bytes(first, last))) = request.get("range").map(parse_range) {
                match resolve(first, last, len) {
                    Some(r) => {
                        head.status = 206;
                        head.reason = "Partial Content".into();
                        head.headers.push(
                            "Content-Range",
                            format!("bytes {}-{}/{len}", r.start, r.end - 1),
                        );
                        body = r;
                    }
                    None => {
                        let mut h = ResponseHead::new(416, "Range Not Satisfiable");
                        h.headers.push("Content-Range", format!("bytes */{len}"));
                        h.headers.push("Content-Length", "0");
                        return Served {
                            head: h,
                            body: 0..0,
                        };
                    }
                }
            }
        }
        head.headers
            .push_decimal("Content-Length", (body.end - body.start) as u64);
        if method == "HEAD" {
            body = 0..0;
        }
        Served { head, body }
    }

    /// RFC 9110 §13.2.2: `If-None-Match` first (weak comparison), else `If-Modified-Since`.
    fn not_modified_for(&self, request: &Headers) -> bool {
        if request.get("if-none-match").is_some() {
            let Some(etag) = self.headers.get("etag") else {
                return false;
            };
            return request
                .token_iter("if-none-match")
                .any(|t| t == b"*" || weak_eq(t, etag));
        }
        let Some(since) = request.get("if-modified-since").and_then(date) else {
            return false;
        };
        self.headers
            .get("last-modified")
            .or_else(|| self.headers.get("date"))
            .and_then(date)
            .is_some_and(|modified| modified <= since)
    }

    /// `If-Range` (RFC 9110 §13.1.5): the range applies when it is absent or names this
    /// representation (a strong `ETag`, or exactly its `Last-Modified`).
    fn range_applies(&self, request: &Headers) -> bool {
        let Some(cond) = request.get("if-range") else {
            return true;
        };
        if cond.starts_with(b"\"") {
            return self
                .headers
                .get("etag")
                .is_some_and(|e| !e.starts_with(b"W/") && e == cond);
        }
        self.headers.get("last-modified") == Some(cond)
    }
}

/// What a cached answer sends: a head, then `body` of the object's bytes.
#[derive(Debug, Clone)]
pub struct Served {
    pub head: ResponseHead,
    pub body: Range<usize>,
}

fn canonical(lower: &str) -> &'static str {
    match lower {
        "cache-control" => "Cache-Control",
        "content-location" => "Content-Location",
        "date" => "Date",
        "etag" => "ETag",
        "expires" => "Expires",
        _ => "Vary",
    }
}

fn weak_eq(a: &[u8], b: &[u8]) -> bool {
    let strip = |t: &[u8]| t.strip_prefix(b"W/").unwrap_or(t).to_vec();
    strip(a) == strip(b)
}

fn date(v: &[u8]) -> Option<SystemTime> {
    httpdate::parse_http_date(std::str::from_utf8(v).ok()?).ok()
}

/// One byte range: first..=last, or the last N bytes (`first` = `None`).
#[derive(Debug, PartialEq, Eq)]
enum Spec {
    Bytes(Option<u64>, Option<u64>),
}

/// A `Range` value with exactly one byte range; `None` for anything else.
fn parse_range(v: &[u8]) -> Option<Spec> {
    let v = std::str::from_utf8(v).ok()?.trim();
    let (unit, set) = v.split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") || set.contains(',') {
        return None;
    }
    let (a, b) = set.trim().split_once('-')?;
    let num = |s: &str| -> Option<Option<u64>> {
        let s = s.trim();
        if s.is_empty() {
            Some(None)
        } else if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().ok().map(Some)
        } else {
            None
        }
    };
    let (first, last) = (num(a)?, num(b)?);
    match (first, last) {
        (None, None) => None,
        (Some(f), Some(l)) if l < f => None,
        _ => Some(Spec::Bytes(first, last)),
    }
}

/// The bytes a range selects of `len`, or `None` when it selects none (416).
fn resolve(first: Option<u64>, last: Option<u64>, len: usize) -> Option<Range<usize>> {
    let len = len as u64;
    let (start, end) = match (first, last) {
        (Some(f), l) => (f, l.map_or(len, |l| (l + 1).min(len))),
        (None, Some(n)) => (len.saturating_sub(n), len),
        (None, None) => return None,
    };
    (start < end).then_some(start as usize..end as usize)
}

#[cfg(test)]
mod tests;
