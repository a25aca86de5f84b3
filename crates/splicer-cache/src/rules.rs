//! Decisions taken from the request alone (seed 000's first decision point): configured
//! rules say `bypass` (no lookup, the response is spliced and never stored) or `cache` (the
//! default: look up, and decide again on the response head).

use serde::Deserialize;
use splicer_wire::http::Headers;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Look the request up, store the response if it may be stored.
    Cache,
    /// No lookup, no storing: the response is spliced.
    Bypass,
}

/// One rule; every criterion given must match (an empty list matches anything).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub action: Action,
    /// Domain suffixes: `example.org` matches `example.org` and `www.example.org`.
    #[serde(default)]
    pub domains: Vec<String>,
    /// Path prefixes: `/api/` matches `/api/v1?x`.
    #[serde(default)]
    pub paths: Vec<String>,
    /// Methods, upper-case.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Request fields: `"Cookie"` matches when the field is present, `"X-Debug: 1"` when
    /// one of its values is exactly `1`.
    #[serde(default)]
    pub headers: Vec<String>,
}

/// What a rule matches against.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub method: &'a str,
    pub host: &'a str,
    pub path: &'a str,
    pub headers: &'a Headers,
}

/// What is wrong with a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRule {
    #[error("empty domain {0:?}")]
    EmptyDomain(String),
    #[error("path prefix {0:?} must start with '/'")]
    RelativePath(String),
    #[error("header {0:?} has no field name")]
    NoFieldName(String),
}

impl Rule {
    /// Checks the rule's own consistency.
    pub fn validate(&self) -> Result<(), BadRule> {
        if let Some(d) = self.domains.iter().find(|d| d.is_empty()) {
            return Err(BadRule::EmptyDomain(d.clone()));
        }
        if let Some(p) = self.paths.iter().find(|p| !p.starts_with('/')) {
            return Err(BadRule::RelativePath(p.clone()));
        }
        if let Some(h) = self.headers.iter().find(|h| field_name(h).is_empty()) {
            return Err(BadRule::NoFieldName(h.clone()));
        }
        Ok(())
    }

    fn matches(&self, t: Target<'_>) -> bool {
        let host = t.host.trim_end_matches('.');
        let domain = |d: &String| {
            let d = d.trim_start_matches('.').trim_end_matches('.');
            host.eq_ignore_ascii_case(d)
                || (host.len() > d.len()
                    && host.as_bytes()[host.len() - d.len() - 1] == b'.'
                    && host[host.len() - d.len()..].eq_ignore_ascii_case(d))
        };
        let header = |h: &String| {
            let name = field_name(h);
            match h.split_once(':') {
                Some((_, want)) => t
                    .headers
                    .get_all(name)
                    .any(|v| v.trim_ascii() == want.trim().as_bytes()),
                None => t.headers.get(name).is_some(),
            }
        };
        (self.domains.is_empty() || self.domains.iter().any(domain))
            && (self.paths.is_empty() || self.paths.iter().any(|p| t.path.starts_with(p.as_str())))
            && (self.methods.is_empty() || self.methods.iter().any(|m| m == t.method))
            && (self.headers.is_empty() || self.headers.iter().any(header))
    }
}

fn field_name(h: &str) -> &str {
    h.split(':').next().unwrap_or("").trim()
}

/// The first matching rule's action, else `cache`.
pub fn decide(rules: &[Rule], t: Target<'_>) -> Action {
    rules
        .iter()
        .find(|r| r.matches(t))
        .map_or(Action::Cache, |r| r.action)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(toml_like: (&[&str], &[&str], &[&str], &[&str])) -> Rule {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule {
            action: Action::Bypass,
            domains: v(toml_like.0),
            paths: v(toml_like.1),
            methods: v(toml_like.2),
            headers: v(toml_like.3),
        }
    }

    fn target<'a>(host: &'a str, path: &'a str, headers: &'a Headers) -> Target<'a> {
        Target {
            method: "GET",
            host,
            path,
            headers,
        }
    }

    #[test]
    fn each_criterion_narrows() {
        let none = Headers::default();
        let mut cookie = Headers::default();
        cookie.push("Cookie", "a=1");
        cookie.push("X-Debug", "1");
        let rules = [rule((&["example.org"], &[], &[], &[]))];
        assert_eq!(
            decide(&rules, target("www.example.org", "/", &none)),
            Action::Bypass
        );
        assert_eq!(
            decide(&rules, target("example.org", "/", &none)),
            Action::Bypass
        );
        assert_eq!(
            decide(&rules, target("badexample.org", "/", &none)),
            Action::Cache
        );
        let rules = [rule((&[], &["/api/"], &[], &[]))];
        assert_eq!(
            decide(&rules, target("h", "/api/x?y", &none)),
            Action::Bypass
        );
        assert_eq!(decide(&rules, target("h", "/apix", &none)), Action::Cache);
        let rules = [rule((&[], &[], &[], &["cookie"]))];
        assert_eq!(decide(&rules, target("h", "/", &cookie)), Action::Bypass);
        assert_eq!(decide(&rules, target("h", "/", &none)), Action::Cache);
        let rules = [rule((&[], &[], &[], &["x-debug: 1"]))];
        assert_eq!(decide(&rules, target("h", "/", &cookie)), Action::Bypass);
        let rules = [rule((&[], &[], &[], &["x-debug: 2"]))];
        assert_eq!(decide(&rules, target("h", "/", &cookie)), Action::Cache);
        let rules = [rule((&[], &[], &["HEAD"], &[]))];
        assert_eq!(decide(&rules, target("h", "/", &none)), Action::Cache);
    }

    #[test]
    fn first_match_wins() {
        let none = Headers::default();
        let mut cache_api = rule((&[], &["/api/static/"], &[], &[]));
        cache_api.action = Action::Cache;
        let rules = [cache_api, rule((&[], &["/api/"], &[], &[]))];
        assert_eq!(
            decide(&rules, target("h", "/api/static/a", &none)),
            Action::Cache
        );
        assert_eq!(decide(&rules, target("h", "/api/x", &none)), Action::Bypass);
    }

    #[test]
    fn bad_rules_are_refused() {
        assert!(rule((&[""], &[], &[], &[])).validate().is_err());
        assert!(rule((&[], &["api"], &[], &[])).validate().is_err());
        assert!(rule((&[], &[], &[], &[": x"])).validate().is_err());
        assert!(rule((&["a.org"], &["/"], &["GET"], &["Cookie"]))
            .validate()
            .is_ok());
    }
}
