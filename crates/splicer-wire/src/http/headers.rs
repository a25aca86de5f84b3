//! A head's header fields, held in one buffer.
//!
//! Every request and response a proxy forwards has its head parsed and written again, so the
//! fields are allocated per message. One `String` and one `Vec` per field made the allocator
//! the largest user-space cost of a small exchange (about 12% of the proxy's CPU at 1 KiB);
//! here the names and values of a head share one byte buffer and one table of spans: two
//! allocations per head, whatever its number of fields.

use std::fmt;

/// One header field as stored; the name keeps the sender's spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    pub name: &'a str,
    pub value: &'a [u8],
}

/// Where one field's name and value are in the buffer: the name at `start..mid`, the value
/// at `mid..end`.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: usize,
    mid: usize,
    end: usize,
}

impl Span {
    fn field(self, bytes: &[u8]) -> Field<'_> {
        // Names come in as `&str` (from the parser or from code) and are stored whole, so
        // this never fails; an empty name would be the sign of a bug, not of bad input.
        let name = std::str::from_utf8(&bytes[self.start..self.mid]).unwrap_or_default();
        Field {
            name,
            value: &bytes[self.mid..self.end],
        }
    }

    /// The name's bytes, without the check `field` makes (look-ups and rewrites compare
    /// bytes; a head's every field is looked at several times per message).
    fn name(self, bytes: &[u8]) -> &[u8] {
        &bytes[self.start..self.mid]
    }

    fn value(self, bytes: &[u8]) -> &[u8] {
        &bytes[self.mid..self.end]
    }

    fn is_named(self, bytes: &[u8], name: &str) -> bool {
        self.name(bytes).eq_ignore_ascii_case(name.as_bytes())
    }
}

/// Header fields in order, with case-insensitive look-ups. Removing a field leaves its bytes
/// in the buffer until [`Headers::shrink_to_fit`]: heads live for one exchange, and only
/// the cache keeps them longer (and shrinks them).
#[derive(Clone, Default)]
pub struct Headers {
    bytes: Vec<u8>,
    spans: Vec<Span>,
}

impl Headers {
    /// Room for `fields` fields of `bytes` bytes of names and values in all.
    pub fn with_capacity(fields: usize, bytes: usize) -> Headers {
        Headers {
            bytes: Vec::with_capacity(bytes),
            spans: Vec::with_capacity(fields),
        }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Removes every field, keeping the room (a table reused for the next head).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
    }

    /// Makes room for `fields` more fields of `bytes` more bytes.
    pub fn reserve(&mut self, fields: usize, bytes: usize) {
        self.bytes.reserve(bytes);
        self.spans.reserve(fields);
    }

    /// The bytes this table has allocated, in use or not.
    pub fn allocated(&self) -> usize {
        self.bytes.capacity() + self.spans.capacity() * std::mem::size_of::<Span>()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The fields in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Field<'_>> + ExactSizeIterator + '_ {
        self.spans.iter().map(|s| s.field(&self.bytes))
    }

    pub fn get(&self, name: &str) -> Option<&[u8]> {
        self.spans
            .iter()
            .find(|s| s.is_named(&self.bytes, name))
            .map(|s| s.value(&self.bytes))
    }

    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.spans
            .iter()
            .filter(move |s| s.is_named(&self.bytes, name))
            .map(|s| s.value(&self.bytes))
    }

    /// Appends a field.
    pub fn push(&mut self, name: &str, value: impl AsRef<[u8]>) {
        let span = self.store(name, |b| b.extend_from_slice(value.as_ref()));
        self.spans.push(span);
    }

    /// Appends a field whose value is `parts` back to back, without a buffer of its own.
    pub fn push_parts(&mut self, name: &str, parts: &[&[u8]]) {
        let span = self.store(name, |b| parts.iter().for_each(|p| b.extend_from_slice(p)));
        self.spans.push(span);
    }

    /// Appends a field whose value is `n` in decimal (a `Content-Length`, per message).
    pub fn push_decimal(&mut self, name: &str, n: u64) {
        let span = self.store(name, |b| write_decimal(b, n));
        self.spans.push(span);
    }

    /// Inserts a field at `index` (at most [`Headers::len`]).
    pub fn insert(&mut self, index: usize, name: &str, value: impl AsRef<[u8]>) {
        let span = self.store(name, |b| b.extend_from_slice(value.as_ref()));
        self.spans.insert(index, span);
    }

    /// Inserts a field whose value is `parts` back to back at `index` (at most
    /// [`Headers::len`]), without a buffer of its own (the `Host` a request goes upstream
    /// with).
    pub fn insert_parts(&mut self, index: usize, name: &str, parts: &[&[u8]]) {
        let span = self.store(name, |b| parts.iter().for_each(|p| b.extend_from_slice(p)));
        self.spans.insert(index, span);
    }

    /// Writes a field's name, then its value with `value`, at the end of the buffer.
    fn store(&mut self, name: &str, value: impl FnOnce(&mut Vec<u8>)) -> Span {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name.as_bytes());
        let mid = self.bytes.len();
        value(&mut self.bytes);
        Span {
            start,
            mid,
            end: self.bytes.len(),
        }
    }

    /// Removes every field called `name`.
    pub fn remove(&mut self, name: &str) {
        let Headers { bytes, spans } = self;
        spans.retain(|s| !s.is_named(bytes, name));
    }

    /// Keeps the fields for which `keep` says so, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(Field<'_>) -> bool) {
        let Headers { bytes, spans } = self;
        spans.retain(|s| keep(s.field(bytes)));
    }

    /// Drops the bytes of removed fields and any spare room: for heads kept beyond their
    /// exchange (the cache's), whose weight is counted.
    pub fn shrink_to_fit(&mut self) {
        *self = self.to_compact();
    }

    /// A copy without the bytes of removed fields or spare room.
    pub fn to_compact(&self) -> Headers {
        let mut tight = Headers::with_capacity(self.len(), self.weight_of_values());
        tight.extend(self.iter());
        tight
    }

    /// The bytes of the names and values of the fields still present.
    fn weight_of_values(&self) -> usize {
        self.spans.iter().map(|s| s.end - s.start).sum()
    }

    /// The bytes the fields take on the wire (`name: value` and CRLF each).
    pub fn wire_len(&self) -> usize {
        self.weight_of_values() + 4 * self.len()
    }

    /// The comma-separated tokens of all values of `name`, trimmed, as sent.
    pub fn token_iter<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.get_all(name)
            .flat_map(|v| v.split(|&b| b == b','))
            .map(|t| t.trim_ascii())
            .filter(|t| !t.is_empty())
    }

    /// Lower-cased tokens of all comma-separated values of `name`.
    pub fn tokens(&self, name: &str) -> Vec<String> {
        self.token_iter(name)
            .map(|t| String::from_utf8_lossy(t).to_ascii_lowercase())
            .collect()
    }

    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.token_iter(name)
            .any(|t| t.eq_ignore_ascii_case(token.as_bytes()))
    }

    /// Removes hop-by-hop fields (RFC 9110 §7.6.1): the fixed list plus those named in
    /// `Connection`. `Transfer-Encoding` is kept because Splicer relays chunked bodies
    /// verbatim, framing included. Runs on every request and response, so it allocates
    /// nothing unless `Connection` names fields beyond the fixed list (`Connection:
    /// keep-alive`, most kept-alive messages', names none): copying the named tokens was
    /// two allocations per message, a tenth of a small exchange's.
    pub fn remove_hop_by_hop(&mut self) {
        const FIXED: &[&str] = &[
            "connection",
            "keep-alive",
            "proxy-connection",
            "proxy-authenticate",
            "proxy-authorization",
            "te",
            "trailer",
            "upgrade",
        ];
        let fixed = |n: &[u8]| FIXED.iter().any(|x| n.eq_ignore_ascii_case(x.as_bytes()));
        let Headers { bytes, spans } = self;
        // The tokens borrow the field bytes only, so the table can be edited beside them.
        let bytes: &[u8] = bytes;
        let named: Vec<&[u8]> = spans
            .iter()
            .filter(|s| s.is_named(bytes, "connection"))
            .flat_map(|s| s.value(bytes).split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|t| !t.is_empty() && !fixed(t))
            .collect();
        spans.retain(|s| {
            let n = s.name(bytes);
            n.eq_ignore_ascii_case(b"transfer-encoding")
                || !(fixed(n) || named.iter().any(|t| n.eq_ignore_ascii_case(t)))
        });
    }

    /// Writes the fields and the blank line that ends a head.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.wire_len() + 2);
        for s in &self.spans {
            out.extend_from_slice(s.name(&self.bytes));
            out.extend_from_slice(b": ");
            out.extend_from_slice(s.value(&self.bytes));
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// Writes `n` in decimal. Heads are written per message, so without the formatting
/// machinery.
pub fn write_decimal(out: &mut Vec<u8>, n: u64) {
    let mut digits = [0u8; 20];
    out.extend_from_slice(decimal(n, &mut digits));
}

/// `n` in decimal, written at the end of `digits` (room for any `u64`).
pub fn decimal(n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut at = digits.len();
    let mut n = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &digits[at..]
}

impl<'a> FromIterator<Field<'a>> for Headers {
    fn from_iter<I: IntoIterator<Item = Field<'a>>>(iter: I) -> Headers {
        let mut h = Headers::default();
        h.extend(iter);
        h
    }
}

impl<'a> Extend<Field<'a>> for Headers {
    fn extend<I: IntoIterator<Item = Field<'a>>>(&mut self, iter: I) {
        for f in iter {
            self.push(f.name, f.value);
        }
    }
}

/// Equal when the same fields come in the same order, wherever their bytes are held.
impl PartialEq for Headers {
    fn eq(&self, other: &Headers) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Headers {}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.iter()
                    .map(|h| (h.name, String::from_utf8_lossy(h.value))),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the fields must look like: the plain list the buffer stands for.
    type Model = Vec<(String, Vec<u8>)>;

    #[derive(Debug, Clone)]
    enum Op {
        Push(usize, Vec<u8>),
        Insert(usize, usize, Vec<u8>),
        Remove(usize),
        RetainLongerThan(usize),
        Shrink,
    }

    const NAMES: [&str; 4] = ["Host", "host", "X-A", "Cache-Control"];

    fn op() -> impl Strategy<Value = Op> {
        let value = proptest::collection::vec(any::<u8>(), 0..12);
        prop_oneof![
            (0..NAMES.len(), value.clone()).prop_map(|(n, v)| Op::Push(n, v)),
            (0..8usize, 0..NAMES.len(), value).prop_map(|(i, n, v)| Op::Insert(i, n, v)),
            (0..NAMES.len()).prop_map(Op::Remove),
            (0..12usize).prop_map(Op::RetainLongerThan),
            Just(Op::Shrink),
        ]
    }

    fn apply(h: &mut Headers, m: &mut Model, op: &Op) {
        match op {
            Op::Push(n, v) => {
                h.push(NAMES[*n], v);
                m.push((NAMES[*n].into(), v.clone()));
            }
            Op::Insert(i, n, v) => {
                let i = (*i).min(m.len());
                h.insert(i, NAMES[*n], v);
                m.insert(i, (NAMES[*n].into(), v.clone()));
            }
            Op::Remove(n) => {
                h.remove(NAMES[*n]);
                m.retain(|(name, _)| !name.eq_ignore_ascii_case(NAMES[*n]));
            }
            Op::RetainLongerThan(k) => {
                h.retain(|f| f.value.len() > *k);
                m.retain(|(_, v)| v.len() > *k);
            }
            Op::Shrink => h.shrink_to_fit(),
        }
    }

    proptest! {
        /// Any sequence of edits leaves the fields the plain list has, in its order, with
        /// the same look-ups, encoding and weight.
        #[test]
        fn edits_agree_with_a_plain_list(ops in proptest::collection::vec(op(), 0..40)) {
            let (mut h, mut m) = (Headers::default(), Model::new());
            for op in &ops {
                apply(&mut h, &mut m, op);
                let fields: Vec<_> = h.iter().map(|f| (f.name.to_string(), f.value.to_vec())).collect();
                prop_assert_eq!(&fields, &m);
                for name in NAMES {
                    let want: Vec<&[u8]> = m.iter()
                        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.as_slice())
                        .collect();
                    prop_assert_eq!(h.get_all(name).collect::<Vec<_>>(), want.clone());
                    prop_assert_eq!(h.get(name), want.first().copied());
                }
                let mut wire = Vec::new();
                h.encode(&mut wire);
                let mut want = Vec::new();
                for (n, v) in &m {
                    want.extend_from_slice(format!("{n}: ").as_bytes());
                    want.extend_from_slice(v);
                    want.extend_from_slice(b"\r\n");
                }
                want.extend_from_slice(b"\r\n");
                prop_assert_eq!(wire.len(), h.wire_len() + 2);
                prop_assert_eq!(wire, want);
                prop_assert_eq!(&h.to_compact(), &h);
            }
        }
    }

    #[test]
    fn compaction_drops_the_bytes_of_removed_fields() {
        let mut h = Headers::default();
        h.push("Connection", "x".repeat(1000));
        h.push("Age", "1");
        h.remove("connection");
        assert!(h.bytes.len() > 1000, "a removal leaves the bytes");
        h.shrink_to_fit();
        assert_eq!(h.bytes.capacity(), "Age1".len());
        assert_eq!(
            h.iter().collect::<Vec<_>>(),
            [Field {
                name: "Age",
                value: b"1"
            }]
        );
    }

    #[test]
    fn decimals_are_written_as_formatting_would() {
        for n in [0, 7, 10, 99, 200, 65_535, 1 << 40, u64::MAX] {
            let mut h = Headers::default();
            h.push_decimal("Content-Length", n);
            assert_eq!(h.get("content-length"), Some(n.to_string().as_bytes()));
        }
        let mut h = Headers::default();
        h.push_parts("Via", &[b"1.", b"1", b" ", b"splicer"]);
        assert_eq!(h.get("via"), Some(&b"1.1 splicer"[..]));
    }
}
