//! The fuzz targets' differential property (`fuzz/fuzz_targets/differential.rs`) in the
//! normal suite: requests and responses built from hostile pieces (odd chunk sizes and
//! extensions, bare LFs, trailers, duplicated framing fields), each checked as the fuzzers
//! check them.

#[path = "../../../fuzz/fuzz_targets/differential.rs"]
mod differential;

use proptest::prelude::*;

fn piece() -> impl Strategy<Value = String> {
    proptest::sample::select(vec![
        "5\r\nhello\r\n",
        "05;a=b\r\nhello\r\n",
        "5 ; x=\"q;r\"\r\nhello\r\n",
        "3\nabc\r\n",
        "0\r\n\r\n",
        "0\r\nX-T: 1\r\n\r\n",
        "0\r\nContent-Length: 9\r\nHost: evil\r\n\r\n",
        "0\r\nX: a\n\nGET /SMUGGLED HTTP/1.1\r\n\r\n",
        "8000000000000000\r\n",
        "ffffffffffffffff\r\n",
        "zz\r\n",
        "1\r\nx\r\n",
        "\r\n",
        "\n",
        "GET /next HTTP/1.1\r\n\r\n",
    ])
    .prop_map(String::from)
}

fn field() -> impl Strategy<Value = String> {
    proptest::sample::select(vec![
        "Transfer-Encoding: chunked\r\n",
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: identity, chunked\r\n",
        "Transfer-Encoding: chunked, chunked\r\n",
        "Transfer-Encoding: Chunked\r\n",
        "Transfer-Encoding: gzip\r\n",
        "Content-Length: 5\r\n",
        "Content-Length: 5, 5\r\n",
        "Content-Length: 6\r\n",
        "Connection: close, Content-Length\r\n",
        "Connection: Transfer-Encoding\r\n",
        "Trailer: X-T\r\n",
        "Host: other\r\n",
        "X-A: 1\r\n",
    ])
    .prop_map(String::from)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn forwarded_requests_mean_the_same(
        version in proptest::sample::select(vec!["1.1", "1.0"]),
        fields in proptest::collection::vec(field(), 0..4),
        pieces in proptest::collection::vec(piece(), 0..5),
    ) {
        let msg = format!(
            "POST http://origin.example/x HTTP/{version}\r\n{}\r\n{}",
            fields.concat(),
            pieces.concat()
        );
        differential::check_request(msg.as_bytes());
    }

    #[test]
    fn forwarded_responses_mean_the_same(
        version in proptest::sample::select(vec!["1.1", "1.0"]),
        status in proptest::sample::select(vec![200u16, 204, 304, 404]),
        fields in proptest::collection::vec(field(), 0..4),
        pieces in proptest::collection::vec(piece(), 0..5),
    ) {
        let msg = format!(
            "HTTP/{version} {status} X\r\n{}\r\n{}",
            fields.concat(),
            pieces.concat()
        );
        differential::check_response(msg.as_bytes());
    }

    #[test]
    fn arbitrary_bytes_after_a_chunked_head(tail in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut msg = b"POST http://o/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        msg.extend_from_slice(&tail);
        differential::check_request(&msg);
        let mut msg = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        msg.extend_from_slice(&tail);
        differential::check_response(&msg);
    }
}

/// What the fuzz targets found, kept as regressions.
#[test]
fn fuzz_findings() {
    differential::check_response(
        b"HTTP/1.1 002 OK\r\nU.ansfer-Eansfer-Encodkng: unked\r\n\n0\r\n\rhello\r\n0\r\n\r\n",
    );
}

/// The reproduction, checked directly.
#[test]
fn the_reported_smuggling_request() {
    differential::check_request(
        b"POST http://origin/public HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\
          X: a\n\nGET /SMUGGLED HTTP/1.1\nHost: internal.example\nX-Pad: y\r\n\r\n",
    );
}
