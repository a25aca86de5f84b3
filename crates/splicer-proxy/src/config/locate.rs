//! Where a key stands in a configuration file: the line a check's error names. The file
//! is read again with `toml_edit`, which keeps where each key and table was written, and
//! the key's path is followed through it (`edge.upstream[1].tcp.congestion`: the second
//! `[[edge.upstream]]`, its `tcp` table, the `congestion` key). Searching the text for the
//! key's last name found the first key of that name anywhere, often another section's.

use toml_edit::{ImDocument, Item, Table, Value};

/// The 1-based line of `key` in `text`: of the deepest part of its path the file spells out
/// (a key left at its default is reported at its table's header, a section left out
/// entirely at no line). `None` when the text does not parse or names none of it.
pub fn line(text: &str, key: &str) -> Option<usize> {
    let doc = ImDocument::parse(text).ok()?;
    let at = offset(doc.as_table(), key)?;
    Some(text[..at.min(text.len())].matches('\n').count() + 1)
}

/// One step of a path: a name, and the index within an array under it, if any.
fn steps(key: &str) -> impl Iterator<Item = (&str, Option<usize>)> {
    key.split('.').map(|part| match part.split_once('[') {
        Some((name, rest)) => (name, rest.trim_end_matches(']').parse().ok()),
        None => (part, None),
    })
}

/// A place in the document the path goes through.
#[derive(Clone, Copy)]
enum Node<'a> {
    Table(&'a Table),
    Item(&'a Item),
    Value(&'a Value),
}

impl<'a> Node<'a> {
    /// The child called `name`, and where its key is written.
    fn child(self, name: &str) -> Option<(Node<'a>, Option<usize>)> {
        let table = match self {
            Node::Table(t) => Some(t),
            Node::Item(i) => i.as_table(),
            Node::Value(_) => None,
        };
        if let Some(t) = table {
            let at = t.key(name).and_then(|k| k.span()).map(|s| s.start);
            return Some((Node::Item(t.get(name)?), at));
        }
        let inline = match self {
            Node::Item(i) => i.as_inline_table(),
            Node::Value(v) => v.as_inline_table(),
            Node::Table(_) => None,
        }?;
        let at = inline.key(name).and_then(|k| k.span()).map(|s| s.start);
        Some((Node::Value(inline.get(name)?), at))
    }

    /// The `i`-th table of an array of tables, or value of an array.
    fn index(self, i: usize) -> Option<Node<'a>> {
        match self {
            Node::Item(Item::ArrayOfTables(a)) => a.get(i).map(Node::Table),
            Node::Item(Item::Value(v)) | Node::Value(v) => v.as_array()?.get(i).map(Node::Value),
            _ => None,
        }
    }

    /// Where it is written (a table: its header).
    fn start(self) -> Option<usize> {
        let span = match self {
            Node::Table(t) => t.span(),
            Node::Item(Item::Table(t)) => t.span(),
            Node::Item(Item::ArrayOfTables(a)) => a.span(),
            Node::Item(i) => i.span(),
            Node::Value(v) => v.span(),
        };
        span.map(|s| s.start)
    }
}

/// Where in the text the deepest spelled-out part of `key` starts.
fn offset(root: &Table, key: &str) -> Option<usize> {
    let mut here = Node::Table(root);
    let mut best = None;
    for (name, index) in steps(key) {
        let Some((child, key_at)) = here.child(name) else {
            break;
        };
        best = key_at.or_else(|| child.start()).or(best);
        here = child;
        if let Some(i) = index {
            let Some(element) = here.index(i) else { break };
            best = element.start().or(best);
            here = element;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::line;

    #[test]
    fn keys_are_found_where_they_are_written() {
        let text = "\
[socks]
listen = [\"127.0.0.1:1\"]
[[users]]
name = \"a\"
password = \"x\"
[[users]]
name = \"a\"
password = \"y\"
[[acl.rule]]
action = \"allow\"
[[acl.rule]]
action = \"allow\"
users = [\"b\"]
[edge]
listen = [\"127.0.0.1:2\"]
[[edge.upstream]]
name = \"one\"
servers = [\"127.0.0.1:3\"]
[[edge.upstream]]
name = \"two\"
servers = [\"127.0.0.1:4\"]
tcp = { congestion = \"nope\" }
";
        assert_eq!(line(text, "users[1].name"), Some(7));
        assert_eq!(line(text, "users[0].name"), Some(4));
        assert_eq!(line(text, "acl.rule[1].users"), Some(13));
        // A key left at its default: its table's header.
        assert_eq!(line(text, "acl.rule[0].clients"), Some(9));
        assert_eq!(line(text, "edge.upstream[1].name"), Some(20));
        assert_eq!(line(text, "edge.upstream[1].tcp.congestion"), Some(22));
        assert_eq!(line(text, "edge.listen"), Some(15));
        assert_eq!(line(text, "cache.memory"), None);
        assert_eq!(line("not = [toml", "x"), None);
    }
}
