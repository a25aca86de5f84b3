//! `{NAME}` placeholders in a scenario's command lines, replaced from the bed.

/// A command line whose placeholders cannot all be replaced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPlaceholder {
    #[error("{0:?}: unclosed {{")]
    Unclosed(String),
    #[error("{text:?}: unknown placeholder {{{name}}}")]
    Unknown { text: String, name: String },
}

/// Replaces `{NAME}` placeholders using `lookup`; an unknown name is an error naming it.
pub fn expand(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, BadPlaceholder> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let Some(j) = after.find('}') else {
            return Err(BadPlaceholder::Unclosed(s.to_string()));
        };
        let name = &after[..j];
        let v = lookup(name).ok_or_else(|| BadPlaceholder::Unknown {
            text: s.to_string(),
            name: name.to_string(),
        })?;
        out.push_str(&v);
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    Ok(out)
}
