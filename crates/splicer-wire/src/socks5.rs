//! SOCKS5 messages (RFC 1928) and username/password authentication (RFC 1929).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::Parsed;

/// Protocol version byte of SOCKS5.
pub const VERSION: u8 = 5;
/// Version byte of the RFC 1929 sub-negotiation.
pub const AUTH_VERSION: u8 = 1;

/// Errors from SOCKS5 parsing or encoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("not SOCKS5: version byte {0:#04x}")]
    Version(u8),
    #[error("greeting offers no authentication method")]
    NoMethods,
    #[error("unknown address type {0:#04x}")]
    AddressType(u8),
    #[error("reserved byte is {0:#04x}, not 0")]
    Reserved(u8),
    #[error("empty domain name")]
    EmptyDomain,
    #[error("domain name is not valid text")]
    DomainText,
    #[error("{0} is longer than 255 bytes")]
    TooLong(&'static str),
    #[error("empty {0}")]
    Empty(&'static str),
}

/// Authentication methods (RFC 1928 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    NoAuth,
    Gssapi,
    UserPass,
    Other(u8),
    /// 0xFF: no acceptable method; only ever sent by the server.
    NoAcceptable,
}

impl Method {
    pub fn from_byte(b: u8) -> Method {
        match b {
            0x00 => Method::NoAuth,
            0x01 => Method::Gssapi,
            0x02 => Method::UserPass,
            0xff => Method::NoAcceptable,
            o => Method::Other(o),
        }
    }
    pub fn to_byte(self) -> u8 {
        match self {
            Method::NoAuth => 0x00,
            Method::Gssapi => 0x01,
            Method::UserPass => 0x02,
            Method::NoAcceptable => 0xff,
            Method::Other(o) => o,
        }
    }
}

/// The client's first message: the methods it offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Greeting {
    methods: Vec<Method>,
}

impl Greeting {
    /// Checked constructor: 1 to 255 methods.
    pub fn new(methods: Vec<Method>) -> Result<Greeting, Error> {
        if methods.is_empty() {
            return Err(Error::NoMethods);
        }
        if methods.len() > 255 {
            return Err(Error::TooLong("method list"));
        }
        Ok(Greeting { methods })
    }
    pub fn methods(&self) -> &[Method] {
        &self.methods
    }
    pub fn offers(&self, m: Method) -> bool {
        self.methods.contains(&m)
    }
    pub fn parse(buf: &[u8]) -> Result<Parsed<Greeting>, Error> {
        let (Some(&ver), Some(&n)) = (buf.first(), buf.get(1)) else {
            return check_partial_version(buf);
        };
        if ver != VERSION {
            return Err(Error::Version(ver));
        }
        if n == 0 {
            return Err(Error::NoMethods);
        }
        let end = 2 + n as usize;
        let Some(bytes) = buf.get(2..end) else {
            return Ok(None);
        };
        let methods = bytes.iter().map(|&b| Method::from_byte(b)).collect();
        Ok(Some((Greeting { methods }, end)))
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(VERSION);
        out.push(self.methods.len() as u8);
        out.extend(self.methods.iter().map(|m| m.to_byte()));
    }
}

fn check_partial_version<T>(buf: &[u8]) -> Result<Parsed<T>, Error> {
    match buf.first() {
        Some(&v) if v != VERSION => Err(Error::Version(v)),
        _ => Ok(None),
    }
}

/// The server's method selection: `05 METHOD`.
pub fn encode_method_selection(m: Method) -> [u8; 2] {
    [VERSION, m.to_byte()]
}

/// RFC 1929 username/password request.
#[derive(Clone, PartialEq, Eq)]
pub struct UserPass {
    user: Vec<u8>,
    pass: Vec<u8>,
}

impl fmt::Debug for UserPass {
    // Never print the password, even in debug output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserPass")
            .field("user", &String::from_utf8_lossy(&self.user))
            .finish_non_exhaustive()
    }
}

impl UserPass {
    /// Checked constructor: 1..=255 bytes each.
    pub fn new(user: &[u8], pass: &[u8]) -> Result<UserPass, Error> {
        for (what, v) in [("username", user), ("password", pass)] {
            if v.is_empty() {
                return Err(Error::Empty(what));
            }
            if v.len() > 255 {
                return Err(Error::TooLong(what));
            }
        }
        Ok(UserPass {
            user: user.to_vec(),
            pass: pass.to_vec(),
        })
    }
    pub fn user(&self) -> &[u8] {
        &self.user
    }
    pub fn pass(&self) -> &[u8] {
        &self.pass
    }
    pub fn parse(buf: &[u8]) -> Result<Parsed<UserPass>, Error> {
        let Some(&ver) = buf.first() else {
            return Ok(None);
        };
        if ver != AUTH_VERSION {
            return Err(Error::Version(ver));
        }
        let Some(&ulen) = buf.get(1) else {
            return Ok(None);
        };
        let ulen = ulen as usize;
        let Some(user) = buf.get(2..2 + ulen) else {
            return Ok(None);
        };
        let Some(&plen) = buf.get(2 + ulen) else {
            return Ok(None);
        };
        let pstart = 3 + ulen;
        let Some(pass) = buf.get(pstart..pstart + plen as usize) else {
            return Ok(None);
        };
        let up = UserPass::new(user, pass)?;
        Ok(Some((up, pstart + plen as usize)))
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(AUTH_VERSION);
        out.push(self.user.len() as u8);
        out.extend_from_slice(&self.user);
        out.push(self.pass.len() as u8);
        out.extend_from_slice(&self.pass);
    }
}

/// RFC 1929 reply: `01 STATUS`, 0 = success.
pub fn encode_auth_reply(success: bool) -> [u8; 2] {
    [AUTH_VERSION, if success { 0 } else { 1 }]
}

/// SOCKS5 commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Connect,
    Bind,
    UdpAssociate,
    Other(u8),
}

impl Command {
    fn from_byte(b: u8) -> Command {
        match b {
            1 => Command::Connect,
            2 => Command::Bind,
            3 => Command::UdpAssociate,
            o => Command::Other(o),
        }
    }
    fn to_byte(self) -> u8 {
        match self {
            Command::Connect => 1,
            Command::Bind => 2,
            Command::UdpAssociate => 3,
            Command::Other(o) => o,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Command::Connect => "CONNECT",
            Command::Bind => "BIND",
            Command::UdpAssociate => "UDP_ASSOCIATE",
            Command::Other(_) => "UNKNOWN",
        }
    }
}

/// A destination: an IP address or a domain name the proxy resolves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Addr {
    V4(Ipv4Addr),
    V6(Ipv6Addr),
    Domain(String),
}

impl Addr {
    /// Checked constructor for a domain name: 1..=255 bytes of visible ASCII.
    pub fn domain(name: &str) -> Result<Addr, Error> {
        if name.is_empty() {
            return Err(Error::EmptyDomain);
        }
        if name.len() > 255 {
            return Err(Error::TooLong("domain name"));
        }
        if !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::DomainText);
        }
        Ok(Addr::Domain(name.to_string()))
    }

    fn parse(buf: &[u8]) -> Result<Parsed<Addr>, Error> {
        let Some(&atyp) = buf.first() else {
            return Ok(None);
        };
        match atyp {
            1 => Ok(buf
                .get(1..5)
                .map(|b| (Addr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])), 5))),
            4 => Ok(buf.get(1..17).map(|b| {
                let mut a = [0u8; 16];
                a.copy_from_slice(b);
                (Addr::V6(Ipv6Addr::from(a)), 17)
            })),
            3 => {
                let Some(&n) = buf.get(1) else {
                    return Ok(None);
                };
                let Some(name) = buf.get(2..2 + n as usize) else {
                    return Ok(None);
                };
                let name = std::str::from_utf8(name).map_err(|_| Error::DomainText)?;
                Ok(Some((Addr::domain(name)?, 2 + n as usize)))
            }
            o => Err(Error::AddressType(o)),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Addr::V4(a) => {
                out.push(1);
                out.extend_from_slice(&a.octets());
            }
            Addr::V6(a) => {
                out.push(4);
                out.extend_from_slice(&a.octets());
            }
            Addr::Domain(d) => {
                out.push(3);
                out.push(d.len() as u8);
                out.extend_from_slice(d.as_bytes());
            }
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::V4(a) => write!(f, "{a}"),
            Addr::V6(a) => write!(f, "[{a}]"),
            Addr::Domain(d) => f.write_str(d),
        }
    }
}

impl From<SocketAddr> for Addr {
    fn from(s: SocketAddr) -> Addr {
        match s {
            SocketAddr::V4(a) => Addr::V4(*a.ip()),
            SocketAddr::V6(a) => Addr::V6(*a.ip()),
        }
    }
}

/// A client request: `05 CMD 00 ATYP DST.ADDR DST.PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub command: Command,
    pub addr: Addr,
    pub port: u16,
}

impl Request {
    pub fn parse(buf: &[u8]) -> Result<Parsed<Request>, Error> {
        let (Some(&ver), Some(&cmd), Some(&rsv)) = (buf.first(), buf.get(1), buf.get(2)) else {
            return check_partial_version(buf);
        };
        if ver != VERSION {
            return Err(Error::Version(ver));
        }
        if rsv != 0 {
            return Err(Error::Reserved(rsv));
        }
        let Some((addr, n)) = Addr::parse(&buf[3..])? else {
            return Ok(None);
        };
        let p = 3 + n;
        let Some(port) = buf.get(p..p + 2) else {
            return Ok(None);
        };
        let port = u16::from_be_bytes([port[0], port[1]]);
        Ok(Some((
            Request {
                command: Command::from_byte(cmd),
                addr,
                port,
            },
            p + 2,
        )))
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[VERSION, self.command.to_byte(), 0]);
        self.addr.encode(out);
        out.extend_from_slice(&self.port.to_be_bytes());
    }
}

/// Reply codes (RFC 1928 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyCode {
    Succeeded,
    GeneralFailure,
    NotAllowed,
    NetworkUnreachable,
    HostUnreachable,
    ConnectionRefused,
    TtlExpired,
    CommandNotSupported,
    AddressTypeNotSupported,
    Other(u8),
}

impl ReplyCode {
    pub fn to_byte(self) -> u8 {
        match self {
            ReplyCode::Succeeded => 0,
            ReplyCode::GeneralFailure => 1,
            ReplyCode::NotAllowed => 2,
            ReplyCode::NetworkUnreachable => 3,
            ReplyCode::HostUnreachable => 4,
            ReplyCode::ConnectionRefused => 5,
            ReplyCode::TtlExpired => 6,
            ReplyCode::CommandNotSupported => 7,
            ReplyCode::AddressTypeNotSupported => 8,
            ReplyCode::Other(o) => o,
        }
    }
    pub fn from_byte(b: u8) -> ReplyCode {
        match b {
            0 => ReplyCode::Succeeded,
            1 => ReplyCode::GeneralFailure,
            2 => ReplyCode::NotAllowed,
            3 => ReplyCode::NetworkUnreachable,
            4 => ReplyCode::HostUnreachable,
            5 => ReplyCode::ConnectionRefused,
            6 => ReplyCode::TtlExpired,
            7 => ReplyCode::CommandNotSupported,
            8 => ReplyCode::AddressTypeNotSupported,
            o => ReplyCode::Other(o),
        }
    }
}

/// The server's reply: `05 REP 00 ATYP BND.ADDR BND.PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub code: ReplyCode,
    pub addr: Addr,
    pub port: u16,
}

impl Reply {
    /// A reply with an unspecified bound address, as sent on failures.
    pub fn failure(code: ReplyCode) -> Reply {
        Reply {
            code,
            addr: Addr::V4(Ipv4Addr::UNSPECIFIED),
            port: 0,
        }
    }
    pub fn parse(buf: &[u8]) -> Result<Parsed<Reply>, Error> {
        // Same layout as a request, with the reply code in place of the command.
        let Some((req, n)) = Request::parse(buf)? else {
            return Ok(None);
        };
        let code = ReplyCode::from_byte(req.command.to_byte());
        Ok(Some((
            Reply {
                code,
                addr: req.addr,
                port: req.port,
            },
            n,
        )))
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[VERSION, self.code.to_byte(), 0]);
        self.addr.encode(out);
        out.extend_from_slice(&self.port.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn greeting_round_trip_and_partial() {
        let g = Greeting::new(vec![Method::NoAuth, Method::UserPass]).unwrap();
        let mut b = Vec::new();
        g.encode(&mut b);
        assert_eq!(b, [5, 2, 0, 2]);
        assert_eq!(Greeting::parse(&b).unwrap(), Some((g, 4)));
        for i in 0..b.len() {
            assert_eq!(Greeting::parse(&b[..i]).unwrap(), None, "prefix {i}");
        }
        assert_eq!(
            Greeting::parse(b"GET / HTTP/1.1"),
            Err(Error::Version(b'G'))
        );
        assert_eq!(Greeting::parse(&[5, 0]), Err(Error::NoMethods));
        assert_eq!(Greeting::new(vec![]), Err(Error::NoMethods));
    }

    #[test]
    fn request_round_trip_all_address_types() {
        for addr in [
            Addr::V4(Ipv4Addr::new(10, 1, 2, 3)),
            Addr::V6("2001:db8::1".parse().unwrap()),
            Addr::domain("example.org").unwrap(),
        ] {
            let r = Request {
                command: Command::Connect,
                addr,
                port: 443,
            };
            let mut b = Vec::new();
            r.encode(&mut b);
            assert_eq!(Request::parse(&b).unwrap(), Some((r.clone(), b.len())));
            for i in 0..b.len() {
                assert_eq!(Request::parse(&b[..i]).unwrap(), None);
            }
        }
        assert_eq!(Request::parse(&[5, 1, 0, 9, 0]), Err(Error::AddressType(9)));
        assert_eq!(Request::parse(&[5, 1, 7]), Err(Error::Reserved(7)));
        assert_eq!(
            Request::parse(&[5, 1, 0, 3, 0, 0, 80]),
            Err(Error::EmptyDomain)
        );
    }

    #[test]
    fn userpass_round_trip_and_limits() {
        let up = UserPass::new(b"alice", b"s3cret").unwrap();
        let mut b = Vec::new();
        up.encode(&mut b);
        assert_eq!(UserPass::parse(&b).unwrap(), Some((up.clone(), b.len())));
        assert!(!format!("{up:?}").contains("s3cret"));
        assert_eq!(UserPass::new(b"", b"x"), Err(Error::Empty("username")));
        assert_eq!(
            UserPass::new(&[b'a'; 256], b"x"),
            Err(Error::TooLong("username"))
        );
        assert_eq!(UserPass::parse(&[1, 0, 0]), Err(Error::Empty("username")));
    }

    #[test]
    fn reply_round_trip() {
        let r = Reply {
            code: ReplyCode::HostUnreachable,
            addr: Addr::V4(Ipv4Addr::LOCALHOST),
            port: 9,
        };
        let mut b = Vec::new();
        r.encode(&mut b);
        assert_eq!(b[1], 4);
        assert_eq!(Reply::parse(&b).unwrap(), Some((r, b.len())));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Greeting::parse(&data);
            let _ = Request::parse(&data);
            let _ = UserPass::parse(&data);
            let _ = Reply::parse(&data);
        }

        #[test]
        fn domain_requests_round_trip(name in "[a-z0-9.-]{1,255}", port: u16) {
            let r = Request { command: Command::Connect, addr: Addr::domain(&name).unwrap(), port };
            let mut b = Vec::new();
            r.encode(&mut b);
            prop_assert_eq!(Request::parse(&b).unwrap(), Some((r, b.len())));
        }
    }
}
