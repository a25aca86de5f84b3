//! Access lines in the formats log analysers read: Squid's native `access.log` and the NCSA
//! combined log format. The proxy emits one `access` event per connection or request, with
//! named fields (`splicer_proxy::access::Record::emit`); this layer writes them out.
//!
//! Squid (one line, space separated, as Squid's `logformat squid`):
//! `time.ms elapsed client code/status bytes method URL user hierarchy/peer type`, where
//! `time` is the end in Unix seconds, `elapsed` milliseconds, `bytes` those sent to the
//! client, and `code` from what the cache did: `TCP_MEM_HIT` (a hit), `TCP_HIT` (served
//! stale while revalidated), `TCP_REFRESH_UNMODIFIED` / `TCP_REFRESH_MODIFIED`
//! (revalidated: `304` / a new response), `TCP_REFRESH_FAIL_OLD` (stale, the origin failed),
//! `TCP_CLIENT_REFRESH_MISS` (the client asked for a fresh copy), `TCP_MISS` (the rest:
//! miss, bypass, collapsed onto another fill), `TCP_TUNNEL` (CONNECT and SOCKS),
//! `TCP_DENIED` (403, 407), `NONE` (no request came). A SOCKS reply is given as the HTTP status nearest to it (0 → 200, 2 "not allowed"
//! → 403, other failures → 503).
//!
//! Combined: `client - user [start] "method URL protocol" status bytes "referer" "agent"`,
//! the time in UTC, the protocol `HTTP/1.x` or `SOCKS5`, `bytes` all those sent to the
//! client (the head too, as Squid counts; Apache's `%b` is the body only: the record does
//! not keep the body's share).

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::{Duration, SystemTime};

use splicer_proxy::config::AccessFormat;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

use crate::logs::Handle;

pub struct AccessLayer {
    writer: Handle,
    format: AccessFormat,
}

impl AccessLayer {
    pub fn new(writer: Handle, format: AccessFormat) -> AccessLayer {
        AccessLayer { writer, format }
    }
}

impl<S: Subscriber> Layer<S> for AccessLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let now = SystemTime::now();
        let line = match self.format {
            AccessFormat::Combined => combined(&f, now),
            _ => squid(&f, now),
        };
        // One write per line (O_APPEND keeps it whole); a failed write has nowhere to be
        // reported but the log itself, which may be the same disk.
        let _ = self.writer.make_writer().write_all(line.as_bytes());
    }
}

/// The access event's fields this needs, as text.
#[derive(Debug, Default)]
struct Fields {
    front: String,
    client: String,
    user: String,
    method: String,
    destination: String,
    url: String,
    version: String,
    referer: String,
    user_agent: String,
    status: u64,
    bytes_down: u64,
    duration_ms: u64,
    cache: String,
    content_type: String,
}

impl Visit for Fields {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            "status" => self.status = value,
            "bytes_down" => self.bytes_down = value,
            "duration_ms" => self.duration_ms = value,
            _ => {}
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field.name(), value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `%value` fields (Display) come here, wrapped so that Debug prints their Display.
        self.set(field.name(), format!("{value:?}"));
    }
}

impl Fields {
    fn set(&mut self, name: &str, value: String) {
        let slot = match name {
            "front" => &mut self.front,
            "client" => &mut self.client,
            "user" => &mut self.user,
            "method" => &mut self.method,
            "destination" => &mut self.destination,
            "url" => &mut self.url,
            "version" => &mut self.version,
            "referer" => &mut self.referer,
            "user_agent" => &mut self.user_agent,
            "cache" => &mut self.cache,
            "content_type" => &mut self.content_type,
            _ => return,
        };
        *slot = value;
    }

    /// The client's address without its port.
    fn client_ip(&self) -> &str {
        match self.client.rsplit_once(':') {
            Some((ip, _)) => ip.trim_start_matches('[').trim_end_matches(']'),
            None => &self.client,
        }
    }

    fn tunnel(&self) -> bool {
        self.front == "socks" || self.method == "CONNECT"
    }

    /// The status as HTTP gives it; a SOCKS reply code mapped to the nearest one.
    fn http_status(&self) -> u64 {
        if self.front != "socks" {
            return self.status;
        }
        match (self.method.is_empty(), self.status) {
            (true, _) => 0,
            (false, 0) => 200,
            (false, 2) => 403,
            (false, _) => 503,
        }
    }

    /// The URL, or for a tunnel its destination (as Squid logs a CONNECT).
    fn target(&self) -> &str {
        if self.url.is_empty() || self.url == "-" {
            if self.destination.is_empty() {
                "-"
            } else {
                &self.destination
            }
        } else {
            &self.url
        }
    }
}

/// Squid's result code for the line.
fn squid_code(f: &Fields, status: u64) -> &'static str {
    if f.method.is_empty() {
        return "NONE";
    }
    if matches!(status, 403 | 407) {
        return "TCP_DENIED";
    }
    if f.tunnel() {
        return "TCP_TUNNEL";
    }
    // The cache's words (splicer-cache's `status::Result::name`) as Squid's codes.
    match f.cache.as_str() {
        "hit" => "TCP_MEM_HIT",
        "stale-hit" => "TCP_HIT",
        "stale-if-error" => "TCP_REFRESH_FAIL_OLD",
        "refresh" => "TCP_REFRESH_UNMODIFIED",
        "refresh-modified" => "TCP_REFRESH_MODIFIED",
        "refresh-request" => "TCP_CLIENT_REFRESH_MISS",
        _ => "TCP_MISS",
    }
}

fn squid(f: &Fields, now: SystemTime) -> String {
    let t = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let status = f.http_status();
    let code = squid_code(f, status);
    let (hier, peer) = match code {
        "TCP_MEM_HIT" | "TCP_HIT" | "TCP_REFRESH_FAIL_OLD" | "TCP_DENIED" | "NONE" => {
            ("HIER_NONE", "-".to_string())
        }
        _ => ("HIER_DIRECT", host_of(&f.destination).to_string()),
    };
    let mut line = String::with_capacity(160);
    let _ = writeln!(
        line,
        "{}.{:03} {:>6} {} {code}/{status:03} {} {} {} {} {hier}/{} {}",
        t.as_secs(),
        t.subsec_millis(),
        f.duration_ms,
        word(f.client_ip()),
        f.bytes_down,
        word(or_dash(&f.method)),
        word(f.target()),
        word(or_dash(&f.user)),
        word(or_dash(&peer)),
        word(or_dash(&f.content_type)),
    );
    line
}

fn combined(f: &Fields, now: SystemTime) -> String {
    // The line's time is when the request came, as Apache and nginx log it.
    let start = now
        .checked_sub(Duration::from_millis(f.duration_ms))
        .unwrap_or(now);
    let protocol = if f.front == "socks" {
        "SOCKS5"
    } else {
        or_dash(&f.version)
    };
    let bytes = match f.bytes_down {
        0 => "-".to_string(),
        n => n.to_string(),
    };
    let mut line = String::with_capacity(200);
    let _ = writeln!(
        line,
        "{} - {} [{}] \"{} {} {}\" {:03} {bytes} \"{}\" \"{}\"",
        word(f.client_ip()),
        word(or_dash(&f.user)),
        clf_time(start),
        quoted(or_dash(&f.method)),
        quoted(f.target()),
        quoted(protocol),
        f.http_status(),
        quoted(or_dash(&f.referer)),
        quoted(or_dash(&f.user_agent)),
    );
    line
}

/// `26/Nov/2026:22:34:57 +0000`: the common log format's time, in UTC.
fn clf_time(t: SystemTime) -> String {
    let d = time::OffsetDateTime::from(t);
    let month = d.month().to_string();
    format!(
        "{:02}/{}/{:04}:{:02}:{:02}:{:02} +0000",
        d.day(),
        &month[..3],
        d.year(),
        d.hour(),
        d.minute(),
        d.second()
    )
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// The host of `host:port` (`[v6]:port` too).
fn host_of(destination: &str) -> &str {
    match destination.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|b| b.is_ascii_digit()) => {
            h.trim_start_matches('[').trim_end_matches(']')
        }
        _ => destination,
    }
}

/// A space-separated field: characters that would split it or end the line (space,
/// controls, DEL) as `%XX`, as Squid encodes them.
fn word(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c <= ' ' || c == '\u{7f}' {
            let _ = write!(out, "%{:02X}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// A field inside double quotes: `"` and `\` escaped, controls as `\xHH` (nginx's escaping).
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Fields {
        Fields {
            front: "http".into(),
            client: "10.0.0.7:51000".into(),
            user: "-".into(),
            method: "GET".into(),
            destination: "example.com:80".into(),
            url: "http://example.com/a b".into(),
            version: "HTTP/1.1".into(),
            referer: "-".into(),
            user_agent: "curl/7.88.1 \"x\"".into(),
            status: 200,
            bytes_down: 1234,
            duration_ms: 17,
            cache: "miss".into(),
            content_type: "text/html; charset=utf-8".into(),
        }
    }

    /// The fields as `Record::emit` names them: a real record, emitted through a layer
    /// that reads them as `AccessLayer` does. A field renamed in the proxy would be read
    /// as `-` or 0 here, and the Squid and combined lines would silently lose it.
    #[test]
    fn a_records_fields_are_read_by_their_names() {
        use std::sync::{Arc, Mutex};
        use tracing_subscriber::layer::SubscriberExt;

        struct Capture(Arc<Mutex<Vec<Fields>>>);
        impl<S: Subscriber> Layer<S> for Capture {
            fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
                let mut f = Fields::default();
                event.record(&mut f);
                self.0.lock().unwrap().push(f);
            }
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Capture(seen.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let client = "10.0.0.7:51000".parse().unwrap();
            let mut rec =
                splicer_proxy::access::Record::new(splicer_proxy::config::Front::Http, client);
            rec.user = Some("ann".into());
            rec.method = "GET".into();
            rec.destination = "example.com:80".into();
            rec.url = Some("http://example.com/a".into());
            rec.version = Some("HTTP/1.1");
            rec.referer = Some("http://r.test/".into());
            rec.user_agent = Some("curl/7.88.1".into());
            rec.status = 206;
            rec.bytes_down = 1234;
            rec.cache = Some("hit");
            rec.content_type = Some("text/html".into());
            rec.finish("ok");
            rec.emit();
        });
        let seen = seen.lock().unwrap();
        let [f] = &seen[..] else {
            panic!("one access event: {seen:?}")
        };
        let got = (
            (f.front.as_str(), f.client.as_str(), f.user.as_str()),
            (f.method.as_str(), f.destination.as_str(), f.url.as_str()),
            (
                f.version.as_str(),
                f.referer.as_str(),
                f.user_agent.as_str(),
            ),
            (
                f.status,
                f.bytes_down,
                f.cache.as_str(),
                f.content_type.as_str(),
            ),
        );
        let want = (
            ("http", "10.0.0.7:51000", "ann"),
            ("GET", "example.com:80", "http://example.com/a"),
            ("HTTP/1.1", "http://r.test/", "curl/7.88.1"),
            (206, 1234, "hit", "text/html"),
        );
        assert_eq!(got, want);
    }

    fn at(secs: u64, ms: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(secs * 1000 + ms)
    }

    #[test]
    fn squid_lines_have_squids_ten_fields() {
        let line = squid(&fields(), at(1_796_337_297, 5));
        assert_eq!(
            line,
            "1796337297.005     17 10.0.0.7 TCP_MISS/200 1234 GET http://example.com/a%20b - \
             HIER_DIRECT/example.com text/html;%20charset=utf-8\n"
        );
        let mut hit = fields();
        hit.cache = "hit".into();
        assert!(squid(&hit, at(0, 0)).contains(" TCP_MEM_HIT/200 1234 GET "));
        assert!(squid(&hit, at(0, 0)).contains(" HIER_NONE/- "));
        let mut socks = fields();
        (socks.front, socks.method, socks.url, socks.status) =
            ("socks".into(), "CONNECT".into(), "-".into(), 0);
        socks.user = "alice smith".into();
        assert!(squid(&socks, at(0, 0))
            .contains(" TCP_TUNNEL/200 1234 CONNECT example.com:80 alice%20smith HIER_DIRECT/"));
        socks.status = 2;
        assert!(squid(&socks, at(0, 0)).contains(" TCP_DENIED/403 "));
        let mut denied = fields();
        denied.status = 407;
        assert!(squid(&denied, at(0, 0)).contains(" TCP_DENIED/407 "));
        let mut nothing = fields();
        (nothing.method, nothing.status) = (String::new(), 0);
        assert!(squid(&nothing, at(0, 0)).contains(" NONE/000 1234 - "));
    }

    #[test]
    fn combined_lines_are_apaches() {
        // 2026-12-01 00:00:00 UTC, 17 ms after the request came.
        let line = combined(&fields(), at(1_796_083_200, 17));
        assert_eq!(
            line,
            "10.0.0.7 - - [01/Dec/2026:00:00:00 +0000] \"GET http://example.com/a b HTTP/1.1\" \
             200 1234 \"-\" \"curl/7.88.1 \\\"x\\\"\"\n"
        );
        let mut v6 = fields();
        v6.client = "[2001:db8::1]:443".into();
        v6.bytes_down = 0;
        let line = combined(&v6, at(1_796_083_200, 17));
        assert!(line.starts_with("2001:db8::1 - - ["), "{line}");
        assert!(line.contains("\" 200 - \""), "{line}");
        assert_eq!(quoted("a\nb"), "a\\x0Ab");
    }
}
