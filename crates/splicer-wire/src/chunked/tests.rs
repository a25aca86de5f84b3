//! Unit tests of `chunked`.

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
    assert_eq!(parse_size_line(b"1a\r", 64), Ok(None));
    // Issue 34, item 6: a line ended by a bare LF (or CR) is refused at once, not waited on.
    assert_eq!(
        parse_size_line(b"5\nhello\n0\n\n", 64),
        Err(Error::BareLineEnd)
    );
    assert_eq!(parse_size_line(b"5\rhello", 64), Err(Error::BareLineEnd));
    assert_eq!(parse_size_line(b"5;a\nb\r\n", 64), Err(Error::BareLineEnd));
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
