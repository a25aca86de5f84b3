//! Chunked transfer coding (RFC 9112 §7.1), parsed only as far as needed to relay a body
//! verbatim: the proxy reads each chunk-size line itself and splices the chunk data with
//! `max` = the chunk size, so framing is never broken and data never crosses user space.

use crate::Parsed;

/// Errors in chunked framing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("bad chunk size line")]
    BadSize,
    #[error("chunk size overflows 64 bits")]
    Overflow,
    #[error("chunk line longer than {0} bytes")]
    LineTooLong(usize),
    #[error("chunk data not followed by CRLF")]
    MissingCrlf,
}

/// Parses `HEX[;ext]CRLF`; returns the chunk size and the length of the line.
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
    let rest = &line[hex_end..];
    // Only a chunk extension may follow, optionally after whitespace.
    let trimmed = rest
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .map_or(&[][..], |i| &rest[i..]);
    if !(trimmed.is_empty() || trimmed[0] == b';') {
        return Err(Error::BadSize);
    }
    if trimmed.iter().any(|&b| b < 0x20 && b != b'\t') {
        return Err(Error::BadSize);
    }
    let digits = &line[..hex_end];
    let significant = digits.iter().skip_while(|&&b| b == b'0').count();
    if significant > 16 {
        return Err(Error::Overflow);
    }
    let mut size = 0u64;
    for &d in digits {
        size = (size << 4) | u64::from((d as char).to_digit(16).unwrap_or(0));
    }
    Ok(Some((size, used)))
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
pub fn parse_trailer_line(buf: &[u8], max_line: usize) -> Result<Parsed<bool>, Error> {
    Ok(line(buf, max_line)?.map(|(l, used)| (l.is_empty(), used)))
}

/// Finds a CRLF-terminated line; returns it without the CRLF and the bytes used.
fn line(buf: &[u8], max_line: usize) -> Result<Parsed<&[u8]>, Error> {
    let window = &buf[..buf.len().min(max_line)];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some((&buf[..i], i + 2))),
        None if buf.len() >= max_line => Err(Error::LineTooLong(max_line)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn size_lines() {
        assert_eq!(parse_size_line(b"1a\r\nxx", 64), Ok(Some((26, 4))));
        assert_eq!(parse_size_line(b"0;ext=1\r\n", 64), Ok(Some((0, 9))));
        assert_eq!(parse_size_line(b"FF ;e\r\n", 64), Ok(Some((255, 7))));
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

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_size_line(&data, 64);
            let _ = parse_data_end(&data);
            let _ = parse_trailer_line(&data, 64);
        }

        #[test]
        fn size_round_trip(n: u64) {
            let line = format!("{n:x}\r\n");
            prop_assert_eq!(parse_size_line(line.as_bytes(), 64), Ok(Some((n, line.len()))));
        }
    }
}
