//! The front ends by name: what a client talks to (`socks`, `http`, `edge`). Listeners,
//! tuning and the access log all say which one they serve.

/// Which front end a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    Socks,
    Http,
    Edge,
}

impl Front {
    pub fn name(self) -> &'static str {
        match self {
            Front::Socks => "socks",
            Front::Http => "http",
            Front::Edge => "edge",
        }
    }
}
