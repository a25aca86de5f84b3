//! How the cache handled a request: the `Cache-Status` field (RFC 9211) and the word in
//! the access line (Squid's `TCP_HIT`, `TCP_MISS`, … in lower case).
use std::fmt::Write as _;

/// The cache's part in one exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Result {
    /// Served from the cache without asking the origin.
    Hit,
    /// Served stale while it is refreshed in the background (RFC 5861).
    StaleWhileRevalidate,
    /// Served stale because the origin failed (RFC 5861 `stale-if-error`).
    StaleIfError,
    /// Revalidated with the origin, which said `304`: served from the cache.
    Refresh,
    /// Revalidated, and the origin sent a new response.
    RefreshModified,
    /// Nothing stored matched: asked the origin.
    Miss,
    /// Stored, but another variant (`Vary`).
    VaryMiss,
    /// The request asked not to be served from the cache (`no-cache`, `max-age=0`, …).
    Request,
    /// Read from another client's fill (collapsed forwarding).
    Collapsed,
    /// A rule said bypass.
    Bypass,
    /// The method is never served from the cache.
    Method,
    /// `only-if-cached` and nothing stored: `504`.
    OnlyIfCached,
}

impl Result {
    /// The access-log word.
    pub fn name(self) -> &'static str {
        match self {
            Result::Hit => "hit",
            Result::StaleWhileRevalidate => "stale-hit",
            Result::StaleIfError => "stale-if-error",
            Result::Refresh => "refresh",
            Result::RefreshModified => "refresh-modified",
            Result::Miss => "miss",
            Result::VaryMiss => "vary-miss",
            Result::Request => "refresh-request",
            Result::Collapsed => "collapsed",
            Result::Bypass => "bypass",
            Result::Method => "method",
            Result::OnlyIfCached => "only-if-cached",
        }
    }

    /// Served from what the cache holds (the origin was not waited for).
    pub fn is_hit(self) -> bool {
        matches!(
            self,
            Result::Hit | Result::StaleWhileRevalidate | Result::StaleIfError | Result::Refresh
        )
    }

    /// The `Cache-Status` member of a cache called `name`; `stored` when the response
    /// was (or is being) stored, `ttl` the freshness left of what was served, `status` the
    /// origin's status where it was asked.
    pub fn member(self, name: &str, stored: bool, ttl: Option<u64>, status: Option<u16>) -> String {
        let mut m = String::from(name);
        let fwd = match self {
            Result::Hit => None,
            Result::StaleWhileRevalidate | Result::StaleIfError | Result::Refresh => Some("stale"),
            Result::RefreshModified => Some("stale"),
            Result::Miss | Result::Collapsed => Some("uri-miss"),
            Result::VaryMiss => Some("vary-miss"),
            Result::Request => Some("request"),
            Result::Bypass => Some("bypass"),
            Result::Method => Some("method"),
            Result::OnlyIfCached => Some("miss"),
        };
        if self.is_hit() {
            m.push_str("; hit");
        }
        if let Some(f) = fwd {
            m.push_str("; fwd=");
            m.push_str(f);
        }
        if let Some(s) = status {
            let _ = write!(m, "; fwd-status={s}");
        }
        if let Some(t) = ttl {
            let _ = write!(m, "; ttl={t}");
        }
        if stored {
            m.push_str("; stored");
        }
        if self == Result::Collapsed {
            m.push_str("; collapsed");
        }
        match self {
            Result::StaleWhileRevalidate => m.push_str("; detail=stale-while-revalidate"),
            Result::StaleIfError => m.push_str("; detail=stale-if-error"),
            Result::OnlyIfCached => m.push_str("; detail=only-if-cached"),
            _ => {}
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_follow_rfc_9211() {
        assert_eq!(
            Result::Hit.member("splicer", false, Some(60), None),
            "splicer; hit; ttl=60"
        );
        assert_eq!(
            Result::Miss.member("splicer", true, None, Some(200)),
            "splicer; fwd=uri-miss; fwd-status=200; stored"
        );
        assert_eq!(
            Result::Refresh.member("s", false, Some(5), Some(304)),
            "s; hit; fwd=stale; fwd-status=304; ttl=5"
        );
        assert_eq!(
            Result::Bypass.member("s", false, None, Some(200)),
            "s; fwd=bypass; fwd-status=200"
        );
        assert_eq!(
            Result::Collapsed.member("s", false, None, None),
            "s; fwd=uri-miss; collapsed"
        );
    }
}
